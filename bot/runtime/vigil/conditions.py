"""The watchdog's decisions, pure and on an injected clock: what each look at the process's state means.

A look yields a `Reading` (something is wrong since `since`, because of `cause`) or None (all is well). A
`Tracker` turns readings into onsets and ends: a condition begins once a reading has been wrong for
`after_s`, and ends at the first look that finds nothing wrong. The deciders below make the readings of
each condition from plain values (times on the same monotonic clock, counts, ids); the probes
(bot/runtime/vigil/probes.py, bot/adapter/vigil.py) feed them the process's live state.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


class Change(enum.Enum):
    NONE = "none"
    BEGAN = "began"
    ENDED = "ended"


@dataclass(frozen=True, slots=True)
class Reading:
    """Something is wrong since `since` (the monitor's monotonic clock) because of `cause`."""

    since: float
    cause: str


@dataclass
class Tracker:
    """One condition's state: idle, or active since `since` with `cause` (the latest one seen)."""

    name: str
    after_s: float = 0.0  # how long a reading must have been wrong before the condition begins
    active: bool = False
    since: float = 0.0
    cause: str = ""
    ended_at: float = 0.0

    def observe(self, now: float, reading: Reading | None) -> Change:
        """What this look changes."""
        if reading is None:
            if not self.active:
                return Change.NONE
            self.active = False
            self.ended_at = now
            return Change.ENDED
        if self.active:
            self.cause = reading.cause
            return Change.NONE
        if now - reading.since < self.after_s:
            return Change.NONE
        self.active, self.since, self.cause = True, reading.since, reading.cause
        return Change.BEGAN


# ---------------------------------------------------------------------- answers stored, not delivered


@dataclass(frozen=True, slots=True)
class Pending:
    """An answer whose send fails since `since`: to `chat_id`, the last error `error`."""

    chat_id: int
    since: float
    error: str


def undelivered(now: float, pending: Iterable[Pending], threshold_s: float) -> Reading | None:
    """Answers stored but not delivered for `threshold_s` (0: never a condition)."""
    stuck = sorted((p for p in pending if now - p.since >= threshold_s), key=lambda p: p.since)
    if threshold_s <= 0 or not stuck:
        return None
    chats = len({p.chat_id for p in stuck})
    return Reading(
        stuck[0].since,
        f"{len(stuck)} answer(s) to {chats} chat(s) not delivered; the last error: {stuck[-1].error}",
    )


# ---------------------------------------------------------------------- the job lease


def lease_lapsed(now: float, renewed_at: float, lease_s: float, error: str) -> Reading | None:
    """The heartbeat (which keeps this process's job and chat leases) not renewed for a whole lease: other
    processes may take this one for dead."""
    if now - renewed_at < lease_s:
        return None
    why = f"the last attempt failed: {error}" if error else "no attempt finished"
    return Reading(renewed_at, f"heartbeat not renewed for {now - renewed_at:.0f} s ({why})")


# ---------------------------------------------------------------------- firings stuck in `sending`


@dataclass
class SendingWatch:
    """Firings seen in `sending` (and not being sent by this process) look after look: those seen so for
    `threshold_s` were left there (a process killed while sending them)."""

    threshold_s: float
    first_seen: dict[int, float] = field(default_factory=dict)

    def observe(self, now: float, ids: Iterable[int]) -> tuple[Reading | None, list[int]]:
        """The reading and the stuck ids (oldest first)."""
        seen = set(ids)
        self.first_seen = {i: t for i, t in self.first_seen.items() if i in seen}
        for i in seen:
            self.first_seen.setdefault(i, now)
        stuck = sorted(
            (i for i, t in self.first_seen.items() if now - t >= self.threshold_s),
            key=lambda i: (self.first_seen[i], i),
        )
        if self.threshold_s <= 0 or not stuck:
            return None, []
        shown = ", ".join(f"#{i}" for i in stuck[:5]) + (" ..." if len(stuck) > 5 else "")
        return (
            Reading(
                self.first_seen[stuck[0]],
                f"{len(stuck)} firing(s) in `sending` for over {self.threshold_s:.0f} s ({shown})",
            ),
            stuck,
        )


# ---------------------------------------------------------------------- the sandbox service


@dataclass
class PingWatch:
    """A service pinged now and then: failing since the first failed ping of the current streak."""

    failing_since: float | None = None

    def observe(self, now: float, failures: Sequence[str]) -> Reading | None:
        """`failures`: one line per address that did not answer (empty: every one did)."""
        if not failures:
            self.failing_since = None
            return None
        if self.failing_since is None:
            self.failing_since = now
        return Reading(self.failing_since, "unreachable: " + "; ".join(failures))


# ---------------------------------------------------------------------- webhook mode


@dataclass
class WebhookWatch:
    """getWebhookInfo now and then: updates waiting at Telegram while none arrives here means Telegram
    cannot deliver them (its last error says why)."""

    arrived: int = -1  # updates that had arrived at the previous look
    stalled_since: float | None = None

    def observe(
        self, now: float, pending: int, arrived: int, last_error: str | None, error_age_s: float | None
    ) -> Reading | None:
        """`pending`: pending_update_count; `arrived`: updates received so far; Telegram's last error and
        how long ago it was (None: none)."""
        came = arrived != self.arrived
        self.arrived = arrived
        if came or pending <= 0:
            self.stalled_since = None
            return None
        if self.stalled_since is None:
            self.stalled_since = now
        cause = f"{pending} update(s) wait at Telegram and none arrives"
        if last_error:
            ago = f", {error_age_s:.0f} s ago" if error_age_s is not None else ""
            cause += f"; Telegram's last error: {last_error}{ago}"
        return Reading(self.stalled_since, cause)


__all__ = [
    "Change",
    "Pending",
    "PingWatch",
    "Reading",
    "SendingWatch",
    "Tracker",
    "WebhookWatch",
    "lease_lapsed",
    "undelivered",
]
