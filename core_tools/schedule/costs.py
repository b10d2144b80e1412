"""What a scheduled task is forecast to cost, and the hooks through which the schedule service learns it.

The figures come from the usage service (core_tools.usage: prices, the usage log); bot/process/wiring.py
connects the two through `CostHooks`, so this package imports no other capability.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo

from core_tools.schedule.expand import ExpansionError
from core_tools.schedule.rules import ScheduleInputError, Spec, occurrences_after

FORECAST_DAYS = 30  # "a month" of a forecast: the runs in the next 30 days
MAX_COUNTED_RUNS = 50_000  # a task repeats at most every minute: 43,200 runs in 30 days
MAX_COST_PER_MONTH = 1_000_000.0  # a limit above this is no limit: leave it out


class RunEstimate(Protocol):
    """One run's expected cost (core_tools.usage.tasks.RunForecast)."""

    @property
    def cost(self) -> float | None:
        """USD, or None when the model has no price."""
        ...

    @property
    def model(self) -> str:
        """The model the run is priced at."""
        ...

    @property
    def basis(self) -> str:
        """Where the figure comes from, in words."""
        ...


@dataclass(frozen=True)
class CostHooks:
    """How the schedule service learns what tasks cost: `forecast(user_id, schedule_id or None)` and
    `spent_this_month(user_id, schedule_ids)` (USD per schedule id)."""

    forecast: Callable[[int, int | None], RunEstimate]
    spent_this_month: Callable[[int, Sequence[int]], dict[int, float]]


def usd(value: float) -> str:
    """Money, compact: $0, $0.0042, $1.25 (as /usage writes it); an amount under $0.0001 with two
    significant digits ($0.000021), so a cheap task's spend does not read as nothing."""
    if value == 0:
        return "$0"
    if value < 0.0001:
        return f"${value:.{1 - math.floor(math.log10(value))}f}"
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def check_limit(value: float | None, *, updating: bool) -> float | None:
    """A valid max_cost_per_month (USD), None for none; on update 0 removes a limit (returned as 0.0)."""
    if value is None:
        return None
    if value != value or value < 0 or value > MAX_COST_PER_MONTH:  # NaN too
        raise ScheduleInputError(
            f"max_cost_per_month must be an amount in USD from 0 to {MAX_COST_PER_MONTH:,.0f}"
        )
    if value == 0 and not updating:
        raise ScheduleInputError("max_cost_per_month must be more than 0 (leave it out for no limit)")
    return float(value)


def runs_within(
    spec: Spec, zone: ZoneInfo, now: datetime, fired: int, days: int = FORECAST_DAYS
) -> int | None:
    """How many times a schedule fires in the next `days` days (None when that cannot be worked out)."""
    if spec.repeat is None:
        return 1
    horizon = now + timedelta(days=days)
    until = horizon if spec.until is None else min(spec.until, horizon)
    try:
        runs = len(occurrences_after(replace(spec, until=until), zone, now, MAX_COUNTED_RUNS))
    except ExpansionError:
        return None
    if spec.count is not None:
        runs = min(runs, max(0, spec.count - fired))
    return runs


def forecast_view(
    estimate: RunEstimate, runs: int | None, repeating: bool, limit: float | None
) -> dict[str, Any]:
    """The `forecast` part of a task's view: figures, and a sentence to tell the user."""
    out: dict[str, Any] = {"model": estimate.model, "basis": estimate.basis}
    if estimate.cost is None:
        out["text"] = (
            f"Forecast cost: unknown, {estimate.model} has no price (the owner can set it in LLM_PRICES); "
            f"per run from {estimate.basis}."
        )
        return out
    per_run = estimate.cost
    out["per_run_usd"] = round(per_run, 6)
    if not repeating:
        out["text"] = f"Forecast cost: about {usd(per_run)} for its one run, from {estimate.basis}."
        return out
    if runs is None:
        out["text"] = f"Forecast cost: about {usd(per_run)} per run, from {estimate.basis}."
        return out
    per_month = per_run * runs
    out["runs_in_30_days"] = runs
    out["per_month_usd"] = round(per_month, 6)
    text = (
        f"Forecast cost: about {usd(per_run)} per run and {usd(per_month)} a month ({runs} runs in the "
        f"next {FORECAST_DAYS} days), from {estimate.basis}."
    )
    if limit is not None and per_month > limit:
        within = int(limit // per_run) if per_run > 0 else runs
        text += (
            f" That is over its limit of {usd(limit)} a month: about {within} runs a month fit in it, "
            "later ones are skipped until the next month."
        )
    out["text"] = text
    return out
