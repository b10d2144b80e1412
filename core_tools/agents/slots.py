"""The helper slots of a process, shared fairly between users.

At most `total` sub-turns run at once (SUBAGENT_MAX_CONCURRENT, all users). A free slot is taken at once;
when none is free a helper queues, and a slot given back goes straight to a waiting helper of the user who
holds the fewest slots right now, ties to the user served least recently (round-robin), and within one user
in the order they asked. So one user's fan-out cannot keep another user's helper waiting behind it: while
others wait, a user who holds more than the others gets no slot back, and a user holding none is next.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Hashable
from dataclasses import dataclass, field


@dataclass
class _Queue:
    """One user's waiting helpers, oldest first."""

    waiters: deque[asyncio.Future[None]] = field(default_factory=deque)


class FairSlots:
    """`total` slots; waiters are served fewest-held user first, round-robin between equals (one event
    loop only)."""

    def __init__(self, total: int) -> None:
        if total < 1:
            raise ValueError("at least one helper slot")
        self.total = total
        self.held: dict[Hashable, int] = {}
        self.peak = 0  # the most slots ever held at once
        self._queues: dict[Hashable, _Queue] = {}
        self._served: dict[Hashable, int] = {}  # when a user last got a slot (for round-robin)
        self._clock = itertools.count()

    def in_use(self, user: Hashable | None = None) -> int:
        """Slots held by one user, or by everyone."""
        return sum(self.held.values()) if user is None else self.held.get(user, 0)

    def waiting(self, user: Hashable | None = None) -> int:
        """Helpers waiting for a slot: one user's, or everyone's."""
        if user is not None:
            queue = self._queues.get(user)
            return len(queue.waiters) if queue else 0
        return sum(len(q.waiters) for q in self._queues.values())

    def full(self) -> bool:
        """Whether a helper asking now has to wait."""
        return self.in_use() >= self.total

    def _give(self, user: Hashable) -> None:
        self.held[user] = self.held.get(user, 0) + 1
        self._served[user] = next(self._clock)
        self.peak = max(self.peak, self.in_use())

    async def acquire(self, user: Hashable, timeout_s: float | None = None) -> bool:
        """Take a slot for `user`, waiting up to `timeout_s` (None: no bound); False when none came.
        Cancelled while waiting, it holds nothing (a slot handed to it just then goes on to the next)."""
        if not self.full():
            # Nobody waits while a slot is free: every slot given back goes straight to a waiter.
            self._give(user)
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queues.setdefault(user, _Queue()).waiters.append(fut)
        try:
            async with asyncio.timeout(timeout_s):
                await fut
            return True
        except TimeoutError:
            # True when the slot came in the same instant as the deadline: it is kept.
            return self._settle(user, fut)
        except asyncio.CancelledError:
            if self._settle(user, fut):
                self.release(user)  # handed over just before the cancel: pass it on
            raise

    def _settle(self, user: Hashable, fut: asyncio.Future[None]) -> bool:
        """After a wait ended early: whether the slot was already handed over; otherwise leave the queue."""
        if fut.done() and not fut.cancelled():
            return True
        queue = self._queues.get(user)
        if queue is not None and fut in queue.waiters:
            queue.waiters.remove(fut)
            if not queue.waiters:
                del self._queues[user]
        return False

    def release(self, user: Hashable) -> None:
        """Give back one of `user`'s slots: it goes to the next waiter in fair order, if any."""
        left = self.held.get(user, 0) - 1
        if left < 0:
            raise RuntimeError("release of a helper slot that is not held")
        if left:
            self.held[user] = left
        else:
            self.held.pop(user, None)
        nxt = self._next()
        if nxt is not None:
            who, fut = nxt
            self._give(who)
            fut.set_result(None)

    def _next(self) -> tuple[Hashable, asyncio.Future[None]] | None:
        """The waiter a free slot goes to: its user holds the fewest slots, then was served longest ago."""
        while self._queues:
            # min() keeps the first of equals: the user whose queue is oldest.
            who = min(self._queues, key=lambda u: (self.held.get(u, 0), self._served.get(u, -1)))
            queue = self._queues[who]
            while queue.waiters:
                fut = queue.waiters.popleft()
                if not fut.done():  # a cancelled waiter leaves its own entry; skip it all the same
                    if not queue.waiters:
                        del self._queues[who]
                    return who, fut
            del self._queues[who]
        return None
