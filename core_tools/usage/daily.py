"""A user's usage per day over the last N days, by purpose and model: the app's charts read this.

Days are calendar days in the user's zone (like the caps' periods), so "today" here is today in /usage.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from core_tools.usage.service import UsageService

MAX_DAYS = 90


@dataclass(frozen=True)
class DayLine:
    """One purpose and model on one day: tokens and the estimated cost (None: the model has no price)."""

    day: int  # index into DailyUsage.days
    purpose: str
    model: str
    calls: int
    tokens: int
    cost: float | None


@dataclass(frozen=True)
class DailyUsage:
    """The days (oldest first, today last) and every non-empty line."""

    days: list[date]
    timezone: str
    lines: list[DayLine]


def daily_usage(service: UsageService, user_id: int, days: int) -> DailyUsage:
    """The user's LLM usage per local day for the last `days` days (1 to MAX_DAYS), today included."""
    days = max(1, min(MAX_DAYS, days))
    tz = service.timezone(user_id)
    today = service.clock().astimezone(tz).date()
    dates = [today - timedelta(days=days - 1 - i) for i in range(days)]
    # Local midnights, each worked out on its own: a day with a DST change is 23 or 25 hours long.
    bounds = [
        datetime(d.year, d.month, d.day, tzinfo=tz).astimezone(UTC)
        for d in [*dates, today + timedelta(days=1)]
    ]
    lines = []
    for index, row in service.queries.model_usage_by_day(user_id, bounds):
        cost = service.prices.cost(
            row.model, row.prompt_tokens, row.completion_tokens, row.cached_tokens, row.audio_seconds
        )
        tokens = row.prompt_tokens + row.completion_tokens
        if cost is None and not (tokens or row.audio_seconds):
            cost = 0.0  # a failed call without tokens costs nothing, priced or not
        lines.append(DayLine(index, row.purpose, row.model, row.calls, tokens, cost))
    lines.sort(key=lambda line: (line.day, line.purpose, line.model))
    return DailyUsage(dates, tz.key, lines)
