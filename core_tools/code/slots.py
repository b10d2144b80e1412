"""How much code work may run at once: the limits (CodeLimits) and the slots that count runs and generations
in flight, globally and per user (Slots)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass


@dataclass(frozen=True)
class CodeLimits:
    """How much code work may run at once: the host's bound, whichever executor runs the code."""

    max_runs: int = 2  # sandbox runs at once, all users
    max_runs_per_user: int = 1
    queue_wait_s: float = 60.0  # a run waits this long for a free slot, then the model gets an error
    max_generations: int = 4  # generate calls in flight (foreground or background jobs), all users
    max_generations_per_user: int = 2
    keep_finished_s: float = 3600.0  # a finished job's result stays readable by `status` this long
    max_finished: int = 50  # and at most this many finished jobs are kept (oldest dropped first)


class Slots:
    """Counts work in flight, globally and per user, against two bounds; waiters queue (event loop only)."""

    def __init__(self, total: int, per_user: int) -> None:
        self.total = total
        self.per_user = per_user
        self.busy: dict[int, int] = {}
        self.peak = 0  # the most slots ever taken at once (shown by the bench)
        self._waiters: list[asyncio.Future[None]] = []

    def in_use(self, user_id: int | None = None) -> int:
        """Slots taken by one user, or by everyone."""
        return sum(self.busy.values()) if user_id is None else self.busy.get(user_id, 0)

    def refusal(self, user_id: int) -> str | None:
        """Why `user_id` cannot take a slot now, or None when one is free."""
        if self.in_use(user_id) >= self.per_user:
            return f"you already have {self.in_use(user_id)} running (at most {self.per_user} per user)"
        if self.in_use() >= self.total:
            return f"the bot is running {self.in_use()} for all users (its limit)"
        return None

    def take(self, user_id: int) -> None:
        """Take a slot now; the caller checked `refusal` first (no await in between)."""
        self.busy[user_id] = self.busy.get(user_id, 0) + 1
        self.peak = max(self.peak, self.in_use())

    def give_back(self, user_id: int) -> None:
        """Return a slot and wake the waiters (each checks again whether it may go)."""
        left = self.busy.get(user_id, 0) - 1
        if left > 0:
            self.busy[user_id] = left
        else:
            self.busy.pop(user_id, None)
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait(self, user_id: int, timeout_s: float) -> str | None:
        """Take a slot, waiting up to `timeout_s` for one; the reason for a refusal when none came free."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while (why := self.refusal(user_id)) is not None:
            left = deadline - loop.time()
            if left <= 0:
                return why
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append(fut)
            try:
                await asyncio.wait_for(fut, left)
            except TimeoutError:
                continue  # the loop checks once more, then gives up
            finally:
                if fut in self._waiters:
                    self._waiters.remove(fut)
        self.take(user_id)
        return None
