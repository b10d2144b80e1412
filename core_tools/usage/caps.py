"""Caps and their calendar periods: the defaults, the period windows and a cap's status against spending.

Periods are calendar periods in the *user's* time zone (`users.timezone`, else the configured default zone):
"daily" caps and "today" run from local midnight to the next, "monthly" caps and "month" from the 1st of the
month, "week" from Monday.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

PERIODS = ("daily", "monthly")
KINDS = ("cost", "tokens")
REPORT_PERIODS = ("today", "week", "month")


@dataclass(frozen=True)
class Caps:
    """Default caps for every user (None: no cap)."""

    daily_usd: float | None = None
    monthly_usd: float | None = None
    daily_tokens: int | None = None
    monthly_tokens: int | None = None

    def get(self, period: str, kind: str) -> float | None:
        """The default of one period and kind."""
        value: float | int | None = getattr(self, f"{period}_{'usd' if kind == 'cost' else 'tokens'}")
        return None if value is None else float(value)


@dataclass(frozen=True)
class Window:
    """A calendar period [start, end) in a time zone."""

    name: str  # today | week | month
    start: datetime  # aware
    end: datetime
    tz: ZoneInfo


def window(name: str, now: datetime, tz: ZoneInfo) -> Window:
    """The calendar period `name` (today|daily, week, month|monthly) containing `now`, in zone `tz`."""
    local = now.astimezone(tz)
    if name in ("today", "daily"):
        start = datetime(local.year, local.month, local.day, tzinfo=tz)
        nxt = start.date() + timedelta(days=1)
        end = datetime(nxt.year, nxt.month, nxt.day, tzinfo=tz)
        name = "today"
    elif name == "week":
        monday = local.date() - timedelta(days=local.weekday())
        start = datetime(monday.year, monday.month, monday.day, tzinfo=tz)
        nxt = monday + timedelta(days=7)
        end = datetime(nxt.year, nxt.month, nxt.day, tzinfo=tz)
    elif name in ("month", "monthly"):
        start = datetime(local.year, local.month, 1, tzinfo=tz)
        year, month = (local.year + 1, 1) if local.month == 12 else (local.year, local.month + 1)
        end = datetime(year, month, 1, tzinfo=tz)
        name = "month"
    else:
        raise ValueError(f"unknown period {name!r}")
    return Window(name, start.astimezone(UTC), end.astimezone(UTC), tz)


@dataclass(frozen=True)
class CapStatus:
    """One effective cap of a user and what is spent against it."""

    period: str  # daily | monthly
    kind: str  # cost | tokens
    limit: float
    spent: float
    window: Window
    source: str  # "default" | "owner"
    reserved: float = 0.0  # held by requests in flight (their estimates), not yet recorded

    @property
    def reached(self) -> bool:
        """Spending plus what requests in flight reserved is at or over the cap: the next one must wait."""
        return self.spent + self.reserved >= self.limit
