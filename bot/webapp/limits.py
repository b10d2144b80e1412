"""The app's per-user request limit: a sliding window of the last minute's requests, in this process.

Per process on purpose: a shared count would cost a database write on every request of every page, and what
the limit guards is the process answering (a page stuck in a loop, a script with a user's launch data).
Behind N replicas a user may so make up to N times the limit; each replica still serves only its share.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable


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
