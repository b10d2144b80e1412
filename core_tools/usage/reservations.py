"""The reservation ledger: what requests in flight hold against their users' caps until their usage is in."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

R = TypeVar("R")


@dataclass
class Hold:
    """What one request in flight reserved against its user's caps; released once its usage is recorded."""

    user_id: int | None
    tokens: int = 0
    cost: float = 0.0
    key: int = 0
    _release: Callable[[Hold], None] | None = field(default=None, repr=False)
    # A hold taken with this one in another ledger (a scheduled task's limit), given back with it.
    then: Hold | None = field(default=None, repr=False)

    def release(self) -> None:
        """Give the reservation back (idempotent): the request's usage is recorded by now, or it failed."""
        release, self._release = self._release, None
        if release is not None:
            release(self)
        then, self.then = self.then, None
        if then is not None:
            then.release()


class Reservations:
    """Estimates of requests in flight, per user (or per scheduled task, in the ledger of task limits).

    In-process on purpose: the bot is one process and every LLM/embedding request passes the gate. The lock
    makes "check the caps, then reserve" one step, so parallel requests (one reply's tool calls, a job, a
    summary) cannot all pass a cap before any of them is recorded; a thread calling in is covered too.
    """

    def __init__(self) -> None:
        # Re-entrant: the check run under it reads the holds again (`held`).
        self._lock = threading.RLock()
        self._held: dict[int, dict[int, Hold]] = {}
        self._hold_ids = itertools.count(1)

    def hold_unless(self, user_id: int, tokens: int, cost: float, refuse: Callable[[], R | None]) -> Hold | R:
        """Reserve tokens and cost unless `refuse()`, run under the same lock, gives a reason (returned)."""
        with self._lock:
            reason = refuse()
            if reason is not None:
                return reason
            hold = Hold(user_id, tokens, cost, next(self._hold_ids), self._release)
            self._held.setdefault(user_id, {})[hold.key] = hold
            return hold

    def _release(self, hold: Hold) -> None:
        assert hold.user_id is not None
        with self._lock:
            mine = self._held.get(hold.user_id, {})
            mine.pop(hold.key, None)
            if not mine:
                self._held.pop(hold.user_id, None)

    def held(self, user_id: int) -> list[Hold]:
        """The user's holds now."""
        with self._lock:
            return list(self._held.get(user_id, {}).values())

    def tokens(self, user_id: int) -> int:
        """Tokens reserved by the user's requests in flight."""
        return sum(h.tokens for h in self.held(user_id))
