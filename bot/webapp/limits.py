"""The app's per-user request limit: a sliding window of the last minute's requests, in this process; and
the bound on the log lines that refused clients cause (LogThrottle).

Per process on purpose: a shared count would cost a database write on every request of every page, and what
the limit guards is the process answering (a page stuck in a loop, a script with a user's launch data).
Behind N replicas a user may so make up to N times the limit; each replica still serves only its share.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass


class RateLimiter:
    """At most `limit` requests per `window_s` seconds per key (a user id); memory is one deque per key, and
    keys are only users who passed the signature check (the allowlist bounds them)."""

    def __init__(
        self, limit: int = 60, window_s: float = 60.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.window_s = window_s
        self.clock = clock  # tests pass a frozen clock: the window then never moves on by itself
        self._hits: dict[int, deque[float]] = {}

    def take(self, key: int) -> int | None:
        """Count a request; None when allowed, else the whole seconds to wait (for Retry-After)."""
        now = self.clock()
        hits = self._hits.setdefault(key, deque())
        while hits and hits[0] <= now - self.window_s:
            hits.popleft()
        if len(hits) >= self.limit:
            return max(1, math.ceil(hits[0] + self.window_s - now))
        hits.append(now)
        return None


class LogThrottle:
    """Log lines that a client can cause at will (refused connections, refused requests), bounded: the first
    of a kind is logged at once, the ones after it only counted, and one summary line per `interval_s` says
    how many there were (nothing when there were none). Runs in the event loop (its timers)."""

    def __init__(self, logger: logging.Logger, interval_s: float = 60.0) -> None:
        self.logger = logger
        self.interval_s = interval_s
        self._open: dict[str, _Window] = {}

    def note(self, kind: str, summary: str, message: str, *args: object) -> None:
        """One event of `kind`: `message % args` when none was logged in this interval, else counted;
        the count is logged as "`summary`: N more in the last S s"."""
        window = self._open.get(kind)
        if window is not None:
            window.count += 1
            return
        self.logger.info(message, *args)
        self._open[kind] = _Window(summary, self._later(kind))

    def _later(self, kind: str) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(self.interval_s, self._flush, kind)

    def _flush(self, kind: str) -> None:
        window = self._open.pop(kind, None)
        if window is None or not window.count:
            return  # a quiet interval: the next one is logged at once
        self._log(window)
        window.count, window.timer = 0, self._later(kind)
        self._open[kind] = window

    def _log(self, window: _Window) -> None:
        self.logger.info("%s: %d more in the last %g s", window.summary, window.count, self.interval_s)

    def close(self) -> None:
        """Log what is still counted and stop the timers (the server stops)."""
        for window in self._open.values():
            window.timer.cancel()
            if window.count:
                self._log(window)
        self._open.clear()


@dataclass
class _Window:
    summary: str
    timer: asyncio.TimerHandle
    count: int = 0
