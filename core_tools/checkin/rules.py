"""The check-in's pure parts: what /checkin asks for, what the preflight finds worth saying, and the back-off.

Nothing here reads a clock or a database: every function takes `now` and the rows (db/checkins.py), so a
preflight of 10k users is a few batched queries and these rules (bench/bench_checkin.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from core_tools.errors import ToolError
from db.checkins import PreflightInputs

WEEKDAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
RRULE_DAYS = ("MO", "TU", "WE", "TH", "FR", "SA", "SU")
USAGE = (
    "Usage: /checkin daily HH:MM, /checkin weekly mon HH:MM (add `digest` for an LLM-written summary "
    "instead of the free template), /checkin off, or /checkin alone to see it."
)
_TIME = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$")
# Back-off after ignored check-ins: the least days between two sent ones, per level and cadence.
BACKOFF_DAYS = {"daily": (1, 2, 7), "weekly": (7, 14, 28)}
BACKOFF_WORDS = {
    "daily": ("daily", "every other day", "weekly"),
    "weekly": ("weekly", "every other week", "every four weeks"),
}
IGNORED_BEFORE_BACKOFF = 2
MAX_LEVEL = 2
DONE_PREFIX = "Done "  # a goal marked done at a check-in reads "Done 2026-12-03: <its text>"


class CheckinInputError(ToolError):
    """Bad /checkin input: the message is the usage line."""


@dataclass(frozen=True)
class Request:
    """What a /checkin command asks for: `action` show | off | set."""

    action: str
    cadence: str | None = None
    weekday: int | None = None
    at_local: str | None = None
    digest: bool = False


def parse(args: list[str]) -> Request:
    """`/checkin` arguments -> a Request; CheckinInputError (with USAGE) for anything else."""
    words = [a.strip().lower() for a in args if a.strip()]
    if not words:
        return Request("show")
    if words == ["off"]:
        return Request("off")
    digest = bool(words) and words[-1] == "digest"
    if digest:
        words = words[:-1]
    if len(words) == 2 and words[0] == "daily":
        return Request("set", "daily", None, _time(words[1]), digest)
    if len(words) == 3 and words[0] == "weekly":
        day = words[1][:3]
        if len(words[1]) < 3 or day not in WEEKDAYS:
            raise CheckinInputError(f"I do not know the day {words[1]!r}. {USAGE}")
        return Request("set", "weekly", WEEKDAYS.index(day), _time(words[2]), digest)
    raise CheckinInputError(USAGE)


def _time(text: str) -> str:
    m = _TIME.match(text)
    if m is None:
        raise CheckinInputError(f"{text!r} is not a time like 09:00. {USAGE}")
    return f"{int(m.group(1)):02d}:{m.group(2)}"


def rrule(cadence: str, weekday: int | None) -> str:
    """The schedule rule of a check-in (it fires at every occurrence; the back-off skips some)."""
    if cadence == "weekly":
        assert weekday is not None
        return f"FREQ=WEEKLY;BYDAY={RRULE_DAYS[weekday]}"
    return "FREQ=DAILY"


def first_time(cadence: str, weekday: int | None, at_local: str, zone: ZoneInfo, now: datetime) -> datetime:
    """The first check-in time after `now` (UTC), as a naive local start and its instant."""
    hour, minute = (int(p) for p in at_local.split(":"))
    local_now = now.astimezone(zone)
    day = local_now.date()
    for offset in range(8):
        d = day + timedelta(days=offset)
        if cadence == "weekly" and d.weekday() != weekday:
            continue
        when = datetime(d.year, d.month, d.day, hour, minute, tzinfo=zone)
        # A wall time skipped by a DST change: round-tripping through UTC moves it to a real instant.
        when = when.astimezone(UTC)
        if when > now:
            return when
    raise AssertionError("a day within a week always matches")


def describe(cadence: str, weekday: int | None, at_local: str, zone_name: str) -> str:
    """'daily at 09:00 (Europe/Berlin)', 'weekly on Mon at 18:00 (UTC)'."""
    if cadence == "weekly" and weekday is not None:
        return f"weekly on {WEEKDAYS[weekday].capitalize()} at {at_local} ({zone_name})"
    return f"daily at {at_local} ({zone_name})"


# ---------------------------------------------------------------------- back-off


def due_by_backoff(cadence: str, level: int, last_sent_at: datetime | None, now: datetime) -> bool:
    """At this level, may a check-in be sent now? (An hour of slack: a check-in fires at its minute.)"""
    if last_sent_at is None or level <= 0:
        return True
    days = BACKOFF_DAYS.get(cadence, BACKOFF_DAYS["daily"])[min(level, MAX_LEVEL)]
    return now - last_sent_at >= timedelta(days=days) - timedelta(hours=1)


def after_ignore(level: int, ignored: int) -> tuple[int, int, bool]:
    """One more sent check-in got no press before the next: (level, ignored, backed off now)."""
    ignored += 1
    if ignored >= IGNORED_BEFORE_BACKOFF and level < MAX_LEVEL:
        return level + 1, 0, True
    return level, min(ignored, IGNORED_BEFORE_BACKOFF), False


def backoff_words(cadence: str, level: int) -> str:
    """How often check-ins come at a back-off level, in words."""
    return BACKOFF_WORDS.get(cadence, BACKOFF_WORDS["daily"])[min(max(level, 0), MAX_LEVEL)]


# ---------------------------------------------------------------------- the preflight


@dataclass(frozen=True)
class Limits:
    """What the preflight counts as worth a message."""

    near: timedelta = timedelta(days=7)  # a goal expiring within this
    quiet: timedelta = timedelta(days=21)  # a goal not mentioned (updated) for this long
    cap_near: float = 0.8  # a cap at this share of its limit
    max_items: int = 5


@dataclass(frozen=True)
class CapFigure:
    """One of the user's caps and what is spent against it (core_tools/usage's CapStatus, as plain data)."""

    period: str
    kind: str
    limit: float
    spent: float


def _short(text: str, n: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _days(delta: timedelta) -> int:
    return max(0, int(delta.total_seconds() // 86400))


def preflight(
    inputs: PreflightInputs,
    caps: list[CapFigure],
    now: datetime,
    zone: ZoneInfo,
    limits: Limits = Limits(),
) -> list[dict[str, Any]]:
    """What a check-in would say (no LLM): items of the user's own rows, most pressing first; [] for
    nothing, and then nothing is sent."""
    items: list[dict[str, Any]] = []
    goals = []
    for m in inputs.memories:
        if m.content.startswith(DONE_PREFIX):
            continue
        if m.expires_at is not None and m.expires_at <= now + limits.near:
            left = _days(m.expires_at - now)
            why = "expires today" if left == 0 else f"expires in {left} day{'s' if left != 1 else ''}"
            goals.append((0, m.expires_at, m, why))
        elif m.updated_at <= now - limits.quiet:
            why = f"not mentioned for {_days(now - m.updated_at)} days"
            goals.append((1, m.updated_at, m, why))
    goals.sort(key=lambda g: (g[0], g[1]))
    for _, _, m, why in goals:
        items.append(
            {
                "kind": "goal",
                "ref": m.public_id,
                "text": _short(m.content),
                "why": why,
                "category": m.category,
            }
        )
    end_of_day = _end_of_day(now, zone)
    for r in sorted(inputs.reminders, key=lambda r: r.next_fire_at or now):
        if r.next_fire_at is not None and now <= r.next_fire_at < end_of_day:
            at = r.next_fire_at.astimezone(zone)
            items.append(
                {
                    "kind": "reminder",
                    "ref": str(r.id),
                    "text": _short(r.text),
                    "why": f"today at {at:%H:%M}",
                    "snooze": True,
                }
            )
    for t in inputs.tasks:
        why = (
            f"paused ({t.pause_reason or 'by you'})"
            if t.status == "paused"
            else f"failed {t.failures}x in a row"
        )
        items.append(
            {
                "kind": "task",
                "ref": str(t.id),
                "text": _short(t.text),
                "why": why,
                "paused": t.status == "paused",
            }
        )
    for c in caps:
        if c.limit > 0 and c.spent >= limits.cap_near * c.limit:
            share = round(100 * c.spent / c.limit)
            items.append(
                {
                    "kind": "cap",
                    "ref": f"{c.period}-{c.kind}",
                    "text": f"your {c.period} {'cost' if c.kind == 'cost' else 'token'} cap",
                    "why": f"{share} % used",
                }
            )
    if inputs.check is not None:
        asked, found = inputs.check
        items.append(
            {
                "kind": "memory",
                "ref": "findable",
                "text": f"{asked - found} of {asked} memories were not found by recall at its last check",
                "why": "/memory shows them",
            }
        )
    return items[: limits.max_items]


def _end_of_day(now: datetime, zone: ZoneInfo) -> datetime:
    local = now.astimezone(zone)
    nxt = local.date() + timedelta(days=1)
    return datetime(nxt.year, nxt.month, nxt.day, tzinfo=zone).astimezone(UTC)
