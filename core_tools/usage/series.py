"""Usage over time for the charts: tokens per purpose and cost per model, per local day (or hour).

The buckets are the user's calendar days (a "today" chart: its hours), so a bar is what the user calls a
day, DST days included. Only the largest few purposes and models get a series of their own; the rest is
"other", so a chart stays readable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

from core_tools.usage.prices import PriceTable
from db.series import CallPoint

MAX_SERIES = 5  # series of their own per chart; the rest is summed as "other"
OTHER = "other"


@dataclass(frozen=True)
class Buckets:
    """The bars of a chart: local days (`unit` "day") or the hours of one day ("hour"), in zone `tz`."""

    unit: str
    starts: list[datetime]  # aware, in `tz`
    tz: ZoneInfo

    def index(self, at: datetime) -> int | None:
        """The bucket an instant falls in, or None outside them."""
        if not self.starts:
            return None
        if self.unit == "hour":
            i = int((at - self.starts[0]) // timedelta(hours=1))
        else:
            i = (at.astimezone(self.tz).date() - self.starts[0].date()).days
        return i if 0 <= i < len(self.starts) else None

    def labels(self) -> list[str]:
        """'09' for an hour, '23 Nov' for a day."""
        if self.unit == "hour":
            return [f"{s:%H}" for s in self.starts]
        return [f"{s.day} {s:%b}" for s in self.starts]


def day_buckets(first: date, days: int, tz: ZoneInfo) -> Buckets:
    """`days` local days from `first` on."""
    return Buckets("day", [datetime(d.year, d.month, d.day, tzinfo=tz) for d in _dates(first, days)], tz)


def hour_buckets(start: datetime, end: datetime, tz: ZoneInfo) -> Buckets:
    """The hours of [start, end) (23 or 25 on a DST day), labelled in local time."""
    hours = int((end - start) // timedelta(hours=1))
    return Buckets("hour", [(start + timedelta(hours=i)).astimezone(tz) for i in range(hours)], tz)


def _dates(first: date, days: int) -> list[date]:
    return [first + timedelta(days=i) for i in range(days)]


@dataclass(frozen=True)
class UsageSeries:
    """Tokens per purpose and estimated cost per model, per bucket (each list has a value per bucket)."""

    buckets: Buckets
    tokens_by_purpose: dict[str, list[int]] = field(default_factory=dict)
    cost_by_model: dict[str, list[float]] = field(default_factory=dict)
    unpriced_models: tuple[str, ...] = ()  # models with calls but no price: their cost is not in the chart

    @property
    def empty(self) -> bool:
        """No tokens at all in the window."""
        return not any(any(v) for v in self.tokens_by_purpose.values())


def _top(values: dict[str, list[float]], keep: int) -> dict[str, list[float]]:
    """The `keep` largest series by total, then the rest summed as "other"."""
    ranked = sorted(values.items(), key=lambda kv: (-sum(kv[1]), kv[0]))
    out = dict(ranked[:keep])
    rest = ranked[keep:]
    if rest:
        out[OTHER] = [sum(col) for col in zip(*(v for _, v in rest), strict=True)]
    return out


def usage_series(points: Sequence[CallPoint], buckets: Buckets, prices: PriceTable) -> UsageSeries:
    """Sum LLM calls into the buckets: tokens by purpose, cost by model."""
    n = len(buckets.starts)
    tokens: dict[str, list[float]] = {}
    cost: dict[str, list[float]] = {}
    unpriced: set[str] = set()
    for p in points:
        i = buckets.index(p.at)
        if i is None:
            continue
        tokens.setdefault(p.purpose, [0.0] * n)[i] += p.prompt_tokens + p.completion_tokens
        c = prices.cost(p.model, p.prompt_tokens, p.completion_tokens, p.cached_tokens, p.audio_seconds)
        if c is None:
            if p.prompt_tokens or p.completion_tokens or p.audio_seconds:
                unpriced.add(p.model)
            continue
        cost.setdefault(p.model, [0.0] * n)[i] += c
    return UsageSeries(
        buckets,
        {k: [int(v) for v in vs] for k, vs in _top(tokens, MAX_SERIES).items()},
        _top(cost, MAX_SERIES),
        tuple(sorted(unpriced)),
    )
