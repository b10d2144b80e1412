"""What scheduled tasks cost: spend this month, a run's forecast, a task's monthly limit, unusual runs.

A task run's LLM calls carry its schedule and firing ids (db/attribution.py), so every figure here is read
from the usage log and priced at read time like /usage. Months are calendar months in the user's zone, as
for the monthly caps.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from core_tools.usage.amounts import fine_usd, usd
from core_tools.usage.caps import Window, window
from core_tools.usage.prices import PriceTable, spend_of
from db.attribution import TaskRun
from db.task_costs import RunUsage, TaskCosts

# Before the user has any task run, a run is forecast at this size: a task's turn is typically a request
# with the system prompt and the tools, a tool call, and a second request with its result.
DEFAULT_RUN_PROMPT_TOKENS = 6000
DEFAULT_RUN_COMPLETION_TOKENS = 600
RECENT_RUNS = 20  # the median is of at most this many latest runs...
RECENT_DAYS = 90  # ...of the last 90 days
# A run is compared with the median of at least this many earlier runs of its task: one or two runs say
# too little about what the task usually costs.
MIN_RUNS_FOR_ANOMALY = 3


@dataclass(frozen=True)
class RunForecast:
    """What one run of a task is expected to cost with `model`."""

    model: str
    prompt_tokens: int
    completion_tokens: int
    cost: float | None  # USD; None when the model has no price
    runs: int  # how many runs the median is of; 0: the default size
    own: bool = False  # the median is of this task's own runs (else of the user's task runs)

    @property
    def basis(self) -> str:
        """Where the figure comes from, in words."""
        if not self.runs:
            return (
                f"a default of {self.prompt_tokens:,} input + {self.completion_tokens:,} output tokens per "
                f"run at {self.model}'s price, since there are no task runs yet"
            )
        whose = "this task's" if self.own else "your"
        if self.runs == 1:
            return f"{whose} last task run at {self.model}'s price"
        return f"the median of {whose} last {self.runs} task runs at {self.model}'s price"


@dataclass(frozen=True)
class TaskCapStatus:
    """A task's monthly limit and what is spent and reserved against it."""

    schedule_id: int
    limit: float
    spent: float
    reserved: float
    window: Window

    @property
    def reached(self) -> bool:
        """Spent plus what requests in flight hold is at or over the limit: the next request must wait."""
        return self.spent + self.reserved >= self.limit

    def refusal(self) -> str:
        """The user-facing reason a run (or a request of it) was refused."""
        local = self.window.end.astimezone(self.window.tz)
        held = f" (and {usd(self.reserved)} reserved by requests still running)" if self.reserved > 0 else ""
        return (
            f"Scheduled task #{self.schedule_id} reached its limit of {usd(self.limit)} a month: "
            f"{usd(self.spent)} is spent this month{held}. It runs again from {local.day} {local:%b} "
            "(a new month), or raise or remove its limit (max_cost_per_month)."
        )


@dataclass(frozen=True)
class CostAnomaly:
    """A run that cost far more than its task's usual run."""

    schedule_id: int
    firing_id: int
    value: float  # the run's cost (USD), or its tokens when a price is unknown
    median: float
    runs: int  # how many earlier runs the median is of
    unit: str  # "usd" | "tokens"

    @property
    def factor(self) -> float:
        """How many times the median the run cost."""
        return self.value / self.median

    def describe(self) -> str:
        """'$0.0500, 12.5 times the median of its 5 earlier runs ($0.0040)'."""
        fmt = fine_usd if self.unit == "usd" else (lambda v: f"{int(v):,} tokens")
        return (
            f"{fmt(self.value)}, {self.factor:.1f} times the median of its {self.runs} earlier runs "
            f"({fmt(self.median)})"
        )


def _cost_of(run: RunUsage, prices: PriceTable) -> float | None:
    spend = spend_of(run.rows, prices)
    return None if spend.unpriced_models else spend.cost


def _tokens_of(run: RunUsage) -> int:
    return sum(r.prompt_tokens + r.completion_tokens for r in run.rows)


class TaskSpending:
    """Task costs for the usage service: spend, forecast, the monthly limit, unusual runs."""

    def __init__(
        self,
        costs: TaskCosts,
        prices: PriceTable,
        *,
        clock: Callable[[], datetime],
        timezone: Callable[[int], ZoneInfo],
    ) -> None:
        self.costs = costs
        self.prices = prices
        self.clock = clock
        self.timezone = timezone

    def month(self, user_id: int) -> Window:
        """The current calendar month in the user's zone."""
        return window("month", self.clock(), self.timezone(user_id))

    def spent_this_month(self, user_id: int, schedule_ids: Sequence[int]) -> dict[int, float]:
        """USD each task spent this month (0.0 for a task without calls; unpriced calls add nothing)."""
        w = self.month(user_id)
        usage = self.costs.usage_by_task(schedule_ids, w.start, w.end)
        return {sid: spend_of(usage.get(sid, []), self.prices).cost for sid in schedule_ids}

    def forecast(self, user_id: int, model: str, schedule_id: int | None = None) -> RunForecast:
        """A run's expected cost: the median tokens of this task's runs (an update), else of the user's
        task runs, else the default size, priced at `model`'s price."""
        since = self.clock() - timedelta(days=RECENT_DAYS)
        runs: list[RunUsage] = []
        own = False
        if schedule_id is not None:
            runs = self.costs.recent_runs(
                user_id=user_id, since=since, limit=RECENT_RUNS, schedule_id=schedule_id
            )
            own = bool(runs)
        if not runs:
            runs = self.costs.recent_runs(user_id=user_id, since=since, limit=RECENT_RUNS)
        if runs:
            prompt = int(statistics.median(sum(r.prompt_tokens for r in run.rows) for run in runs))
            completion = int(statistics.median(sum(r.completion_tokens for r in run.rows) for run in runs))
        else:
            prompt, completion = DEFAULT_RUN_PROMPT_TOKENS, DEFAULT_RUN_COMPLETION_TOKENS
        cost = self.prices.cost(model, prompt, completion)
        return RunForecast(model, prompt, completion, cost, len(runs), own)

    def cap_status(self, run: TaskRun, reserved: float) -> TaskCapStatus | None:
        """The run's task limit against this month's spend (None when the task has no limit)."""
        if run.max_cost_per_month is None:
            return None
        w = self.month(run.user_id)
        usage = self.costs.usage_by_task([run.schedule_id], w.start, w.end).get(run.schedule_id, [])
        spent = spend_of(usage, self.prices).cost
        return TaskCapStatus(run.schedule_id, run.max_cost_per_month, spent, reserved, w)

    def anomaly(self, user_id: int, schedule_id: int, firing_id: int, factor: float) -> CostAnomaly | None:
        """The run, when it cost more than `factor` times the median of its task's earlier runs (in USD,
        or in tokens when a price is unknown); None otherwise, or with too few earlier runs to tell."""
        if factor <= 0:
            return None
        this = self.costs.run(firing_id)
        if this is None:
            return None
        earlier = self.costs.recent_runs(
            user_id=user_id,
            since=self.clock() - timedelta(days=RECENT_DAYS),
            limit=RECENT_RUNS,
            schedule_id=schedule_id,
            exclude_firing=firing_id,
        )
        if len(earlier) < MIN_RUNS_FOR_ANOMALY:
            return None
        costs = [_cost_of(r, self.prices) for r in [this, *earlier]]
        values: list[float]
        if all(c is not None for c in costs):
            values, unit = [c or 0.0 for c in costs], "usd"
        else:
            values, unit = [float(_tokens_of(r)) for r in [this, *earlier]], "tokens"
        median = statistics.median(values[1:])
        if median <= 0 or values[0] <= factor * median:
            return None
        return CostAnomaly(schedule_id, firing_id, values[0], median, len(earlier), unit)
