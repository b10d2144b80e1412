"""A pool of sandbox services (`CODE_SANDBOX_URLS`): one `Executor` that spreads runs over several.

Each run goes to the healthy service with the fewest runs this bot has in flight there (ties in turn). A
service that could not take a run before its code started (not reachable, connection lost before the
service said "started", busy, token refused) is set aside for `retry_after_s` and the run goes to the next
one; a run that started is never sent again, whatever happened to it, because running code twice may do
its side effects twice. When every service failed, the run fails with each one's reason.

`isolation` and `languages()` are read on the event loop, so they use what the services said last (their
hellos, asked at start and again by each run) and never wait for a service: a host that drops packets
would otherwise stall every chat for the connect timeout.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence

from core_tools.errors import ToolError
from core_tools.sandbox.client import ServiceExecutor, ServiceInfo, ServiceNotStarted
from core_tools.sandbox.limits import smallest_limits
from core_tools.sandbox.model import ExecutionResult, FileLimits, Isolation, OutputWatcher, SandboxLimits

RETRY_AFTER_S = 5.0


class SandboxPool:
    """Several sandbox services behind the `Executor` protocol."""

    def __init__(
        self,
        members: Sequence[ServiceExecutor],
        retry_after_s: float = RETRY_AFTER_S,
        on_limits: Callable[[], None] | None = None,
    ) -> None:
        """`members`: one client per service, in the order the operator listed them; `on_limits` is told
        when a service's limits are first known or change."""
        if not members:
            raise ValueError("a sandbox pool needs at least one service")
        self.members = list(members)
        self.retry_after_s = retry_after_s
        self._in_flight = [0] * len(self.members)
        self._down_until = [0.0] * len(self.members)
        self._turn = itertools.count()
        self._pinned: Isolation | None = None
        self._last_known = [m.info for m in self.members if m.info is not None]
        # Told when a service's limits are first known or change (the code tool describes them again).
        self.on_limits = on_limits
        for member in self.members:
            member.on_limits = self._limits_changed

    def _limits_changed(self) -> None:
        if self.on_limits is not None:
            self.on_limits()

    def _known(self) -> list[ServiceInfo]:
        """The hellos of the services that answered last time, else the last ones any answered."""
        infos = [m.info for m in self.members if m.info is not None]
        if infos:
            self._last_known = infos
        return infos or self._last_known

    @property
    def isolation(self) -> Isolation:
        """The weakest isolation among the reachable services (UNAVAILABLE when none is)."""
        if self._pinned is not None:
            return self._pinned
        levels = {i.isolation for i in self._known()} - {Isolation.UNAVAILABLE}
        for level in (Isolation.UNSANDBOXED, Isolation.BWRAP):
            if level in levels:
                return level
        return Isolation.UNAVAILABLE

    @isolation.setter
    def isolation(self, value: Isolation) -> None:
        """Pin the reported level (the `Executor` protocol declares a plain attribute)."""
        self._pinned = value

    def languages(self) -> list[str]:
        """The languages every reachable service runs."""
        found = [set(i.languages) for i in self._known() if i.isolation is not Isolation.UNAVAILABLE]
        return sorted(set.intersection(*found)) if found else []

    @property
    def limits(self) -> SandboxLimits | None:
        """What a run gets wherever it goes: the smallest of the services' limits (None while none said)."""
        found = [i.limits for i in self._known() if i.limits is not None]
        return smallest_limits(found) if found else None

    def limit_notes(self) -> list[str]:
        """One line per setting of the bot's that a service overrules, for each service that said so."""
        return [line for member in self.members for line in member.limit_notes()]

    def describe(self) -> str:
        """One line for the startup report and `doctor` (these may wait for each service's hello)."""
        up = [m for m in self.members if m.isolation is not Isolation.UNAVAILABLE]
        parts = [
            m.socket_path + ("" if m in up else f" (not reachable: {m.last_error})") for m in self.members
        ]
        first = up[0].describe() if up else "no service reachable"
        return f"code sandbox pool, {len(up)} of {len(self.members)} services up: {first}; " + ", ".join(
            parts
        )

    def _order(self) -> list[int]:
        """Healthy services, fewest runs in flight first (then in turn), then those set aside."""
        now = time.monotonic()
        turn = next(self._turn)
        n = len(self.members)
        healthy = [i for i in range(n) if self._down_until[i] <= now]
        resting = sorted(
            (i for i in range(n) if self._down_until[i] > now), key=lambda i: self._down_until[i]
        )
        healthy.sort(key=lambda i: (self._in_flight[i], (i - turn) % n))
        return healthy + resting

    async def run(
        self,
        code: str,
        language: str = "python",
        timeout_s: float | None = None,
        *,
        files_in: Mapping[str, bytes] | None = None,
        files_out: FileLimits | None = None,
        on_output: OutputWatcher | None = None,
    ) -> ExecutionResult:
        """Run `code` on one service; another one only if it had not started (see the module)."""
        reasons: list[str] = []
        tried: set[int] = set()
        while True:
            # Chosen afresh after each failure: runs started meanwhile changed what is least busy.
            i = next((j for j in self._order() if j not in tried), None)
            if i is None:
                break
            tried.add(i)
            member = self.members[i]
            self._in_flight[i] += 1
            try:
                result = await member.run(
                    code, language, timeout_s, files_in=files_in, files_out=files_out, on_output=on_output
                )
            except ServiceNotStarted as exc:
                self._down_until[i] = time.monotonic() + self.retry_after_s
                reasons.append(str(exc))
                continue
            finally:
                self._in_flight[i] -= 1
            self._down_until[i] = 0.0
            return result
        raise ToolError("no code sandbox service could take the run: " + "; ".join(reasons))
