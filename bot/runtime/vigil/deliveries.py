"""Answers this process stored and cannot send yet: the front end reports each send that keeps failing (it
goes on retrying, bot/adapter/streaming.py), the watchdog reads how long they wait."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable

from bot.runtime.vigil.conditions import Pending


class Deliveries:
    """The answers whose send fails now, by token; how many of them were delivered late since asked."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._pending: dict[int, Pending] = {}
        self._tokens = itertools.count(1)
        self._late = 0

    def failing(self, chat_id: int, error: str, token: int | None = None) -> int:
        """A send of an answer to `chat_id` failed with `error`: its token (pass it back for the next
        failure of the same answer, which keeps its first failure's time)."""
        if token is not None and token in self._pending:
            old = self._pending[token]
            self._pending[token] = Pending(old.chat_id, old.since, error)
            return token
        token = next(self._tokens)
        self._pending[token] = Pending(chat_id, self.clock(), error)
        return token

    def done(self, token: int | None, delivered: bool) -> None:
        """The answer went (`delivered`) or was given up."""
        if token is not None and self._pending.pop(token, None) is not None and delivered:
            self._late += 1

    def pending(self) -> list[Pending]:
        """The answers waiting now."""
        return list(self._pending.values())

    def take_late(self) -> int:
        """How many answers were delivered after failing, since the last call (and start counting anew)."""
        late, self._late = self._late, 0
        return late
