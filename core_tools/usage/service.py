"""The usage service: accounting queries, the budget gate (the LLM client's BudgetGate) and the owner's view.

The current time comes from an injected clock, so tests drive the period resets. How the reports read in the
chat is bot/texts/usage_report.py; this module gives the numbers.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import NoReturn
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from core_tools.errors import BudgetExceeded, TaskBudgetExceeded
from core_tools.types import Notifier
from core_tools.usage.amounts import amount, describe_reset
from core_tools.usage.caps import KINDS, PERIODS, Caps, CapStatus, Window, window
from core_tools.usage.prices import ModelPrice, PriceTable, Spend, spend_of
from core_tools.usage.reservations import Hold, Reservations
from core_tools.usage.series import UsageSeries, day_buckets, hour_buckets, usage_series
from core_tools.usage.tasks import CostAnomaly, RunForecast, TaskCapStatus, TaskSpending
from db.attribution import current_task_run
from db.series import Series
from db.task_costs import TaskCosts
from db.usage import ActivityCounts, BudgetRow, ModelUsage, UsageQueries, UserInfo

log = logging.getLogger(__name__)

# A turn that started within budget may always give its closing no-tools answer ("final"): that bounds an
# overshoot to one call, and the user gets an answer built from the tool results already paid for.
EXEMPT_PURPOSES = frozenset({"final"})
MAX_SERIES_DAYS = 366  # the longest chart, in days


@dataclass
class PurposeLine:
    """One purpose in a report."""

    purpose: str
    calls: int = 0
    tokens: int = 0
    cost: float = 0.0
    cost_unknown: bool = False


@dataclass
class UsageReport:
    """A user's usage in one window."""

    user_id: int
    window: Window
    spend: Spend
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    llm_calls: int
    llm_errors: int
    purposes: list[PurposeLine]
    activity: ActivityCounts
    caps: list[CapStatus] = field(default_factory=list)
    models: list[PurposeLine] = field(default_factory=list)  # the same figures per model (`purpose`)


@dataclass(frozen=True)
class UserUsage:
    """One user's line of the owner's `/usage all`."""

    user_id: int
    who: str  # describe_user
    spend: Spend
    turns: int
    reached: CapStatus | None  # the first cap the user is at, if any


@dataclass(frozen=True)
class AllUsage:
    """Every active user's usage in one window (periods in the owner's zone), and the total."""

    window: Window
    users: list[UserUsage]
    total: Spend
    total_turns: int


class UsageService:
    """Accounting queries, budgets and the owner's view; the LLM client's and the agent's budget gate."""

    def __init__(
        self,
        queries: UsageQueries,
        *,
        prices: Mapping[str, ModelPrice] | None = None,
        defaults: Caps | None = None,
        owner_id: int | None = None,
        default_timezone: str = "UTC",
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        notifier: Notifier | None = None,
        task_costs: TaskCosts | None = None,
        series: Series | None = None,
    ) -> None:
        self.queries = queries
        self.prices = PriceTable(prices)
        self.defaults = defaults or Caps()
        self.owner_id = owner_id
        self.default_timezone = default_timezone
        self.clock = clock
        self.notifier = notifier  # the front end's: where a cap's notice to the owner goes
        self._tasks: set[asyncio.Task[None]] = set()
        self._reservations = Reservations()
        # Scheduled tasks' own monthly limits: a second ledger, keyed by schedule id. Without `task_costs`
        # tasks have no limits, forecasts or spend of their own.
        self._task_holds = Reservations()
        self.series = series  # the rows of the charts; None: charts have no data
        self.tasks = (
            TaskSpending(task_costs, self.prices, clock=lambda: self.clock(), timezone=self.timezone)
            if task_costs is not None
            else None
        )

    # ------------------------------------------------------------------ time zones and caps

    def timezone(self, user_id: int | None) -> ZoneInfo:
        """The user's zone (else the default, else UTC): periods are calendar periods there."""
        name = (self.queries.user_timezone(user_id) if user_id is not None else None) or self.default_timezone
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            return ZoneInfo("UTC")

    def effective_caps(self, user_id: int) -> dict[tuple[str, str], tuple[float | None, str]]:
        """(period, kind) -> (limit or None, "default" | "owner") for one user."""
        caps: dict[tuple[str, str], tuple[float | None, str]] = {
            (p, k): (self.defaults.get(p, k), "default") for p in PERIODS for k in KINDS
        }
        for row in self.queries.budgets(user_id):
            caps[(row.period, row.kind)] = (row.limit, "owner")
        return caps

    def cap_status(self, user_id: int) -> list[CapStatus]:
        """Every cap that applies to the user, with the current spend against it."""
        now = self.clock()
        tz: ZoneInfo | None = None
        out: list[CapStatus] = []
        caps = self.effective_caps(user_id)
        for period in PERIODS:
            active = [(k, caps[(period, k)]) for k in KINDS if caps[(period, k)][0] is not None]
            if not active:
                continue  # no cap, no queries: the common case costs one small read per request
            tz = tz or self.timezone(user_id)
            w = window(period, now, tz)
            spend = spend_of(self.queries.model_usage(user_id, w.start, w.end), self.prices)
            held = self._reservations.held(user_id)
            for kind, (limit, source) in active:
                assert limit is not None
                spent = spend.cost if kind == "cost" else float(spend.tokens)
                reserved = sum(h.cost if kind == "cost" else float(h.tokens) for h in held)
                out.append(CapStatus(period, kind, limit, spent, w, source, reserved))
        return out

    def _reached(self, user_id: int) -> CapStatus | None:
        return next((c for c in self.cap_status(user_id) if c.reached), None)

    def refusal(self, cap: CapStatus) -> str:
        """The user-facing line: which cap, the current spend, when it resets."""
        now = self.clock()
        spent_when = "today" if cap.period == "daily" else "this month"
        held = (
            f" and {amount(cap.kind, cap.reserved)} is reserved by requests still running"
            if cap.reserved > 0
            else ""
        )
        return (
            f"Usage cap reached: your {cap.period} {'cost' if cap.kind == 'cost' else 'token'} cap is "
            f"{amount(cap.kind, cap.limit)} and {amount(cap.kind, cap.spent)} is spent {spent_when}"
            f"{' (estimated)' if cap.kind == 'cost' else ''}{held}. "
            f"It resets {describe_reset(cap.window, now)}. "
            "Send /usage for details; the owner can change caps with /budget."
        )

    # ------------------------------------------------------------------ the gate

    def check(self, user_id: int | None, purpose: str = "chat") -> None:
        """Raise BudgetExceeded before a request when the user is at or over a cap ("final" is exempt)."""
        if user_id is None or purpose in EXEMPT_PURPOSES:
            return
        cap = self._reached(user_id)
        if cap is not None:
            self._refuse(user_id, purpose, cap)
        task = self._task_reached()
        if task is not None:
            self._refuse_task(user_id, purpose, task)

    def reserve(
        self,
        user_id: int | None,
        purpose: str,
        model: str,
        prompt_tokens: int,
        completion_tokens: int,
        audio_seconds: float = 0,
    ) -> Hold:
        """Check the caps counting what requests in flight reserved, then reserve this request's estimate.

        Raises BudgetExceeded like `check` ("final" is never refused, but it reserves). The caller records
        the request's real usage, then releases the hold: that settles the estimate. A request is admitted
        while spent + reserved is under the cap, so parallel requests overshoot a cap by at most one request
        (when its estimate bounds it: the LLM client sends the completion ceiling as the request's maximum).
        """
        if user_id is None:
            return Hold(None)
        tokens = max(0, prompt_tokens) + max(0, completion_tokens)
        cost = (
            self.prices.cost(model, max(0, prompt_tokens), max(0, completion_tokens), 0, audio_seconds) or 0.0
        )
        task_hold = self._hold_for_task(user_id, purpose, tokens, cost)
        try:
            got = self._reservations.hold_unless(
                user_id, tokens, cost, lambda: None if purpose in EXEMPT_PURPOSES else self._reached(user_id)
            )
        except BaseException:
            if task_hold is not None:
                task_hold.release()
            raise
        if isinstance(got, Hold):
            got.then = task_hold  # released together
            return got
        if task_hold is not None:
            task_hold.release()
        self._refuse(user_id, purpose, got)

    def _hold_for_task(self, user_id: int, purpose: str, tokens: int, cost: float) -> Hold | None:
        """In a scheduled task's run with a monthly limit: reserve against it too (or refuse)."""
        run = current_task_run()
        if run is None or run.max_cost_per_month is None or self.tasks is None:
            return None
        exempt = purpose in EXEMPT_PURPOSES
        got = self._task_holds.hold_unless(
            run.schedule_id, tokens, cost, lambda: None if exempt else self._task_reached()
        )
        if isinstance(got, Hold):
            return got
        self._refuse_task(user_id, purpose, got)

    def _task_reached(self) -> TaskCapStatus | None:
        """The current task run's limit when it is reached (spent + reserved), else None."""
        run = current_task_run()
        if run is None or run.max_cost_per_month is None or self.tasks is None:
            return None
        reserved = sum(h.cost for h in self._task_holds.held(run.schedule_id))
        status = self.tasks.cap_status(run, reserved)
        return status if status is not None and status.reached else None

    def _refuse_task(self, user_id: int, purpose: str, cap: TaskCapStatus) -> NoReturn:
        self.queries.record_turn_event(
            user_id=user_id,
            session_id=None,
            kind="refused",
            detail=f"{purpose}: task #{cap.schedule_id} limit",
        )
        log.info("refused a %s request of task %s: its monthly limit is reached", purpose, cap.schedule_id)
        raise TaskBudgetExceeded(cap.refusal())

    def reserved(self, user_id: int) -> int:
        """Tokens reserved by the user's requests in flight."""
        return self._reservations.tokens(user_id)

    def _refuse(self, user_id: int, purpose: str, cap: CapStatus) -> NoReturn:
        self.queries.record_turn_event(
            user_id=user_id, session_id=None, kind="refused", detail=f"{purpose}: {cap.period} {cap.kind}"
        )
        self._tell_owner(user_id, cap)
        log.info("refused a %s request of user %s: %s %s cap reached", purpose, user_id, cap.period, cap.kind)
        raise BudgetExceeded(self.refusal(cap))

    def over_budget(self, user_id: int) -> str | None:
        """The refusal text when the user is at or over a cap (the agent stops using tools), else None."""
        cap = self._reached(user_id)
        if cap is None:
            task = self._task_reached()
            return None if task is None else task.refusal()
        self._tell_owner(user_id, cap)
        return self.refusal(cap)

    def turn_stopped(self, user_id: int, session_id: str, reason: str) -> None:
        """Count a turn cut short by loop protection or the budget (shown in /usage)."""
        try:
            self.queries.record_turn_event(user_id=user_id, session_id=session_id, kind=reason, detail=None)
        except Exception:  # accounting must not break the answer the user is waiting for
            log.exception("could not record a turn event")

    # ------------------------------------------------------------------ the owner

    def is_owner(self, user_id: int) -> bool:
        """The owner may see everyone's usage and set caps."""
        return self.owner_id is not None and user_id == self.owner_id

    def _tell_owner(self, user_id: int, cap: CapStatus) -> None:
        # The owner sees their own refusals directly; others are reported once per cap and period window,
        # once the cap is really spent (not while requests in flight merely hold part of it).
        if self.owner_id is None or user_id == self.owner_id or cap.spent < cap.limit:
            return
        try:
            first = self.queries.claim_notice(
                user_id=user_id, period=cap.period, kind=cap.kind, window_start=cap.window.start
            )
        except Exception:
            log.exception("could not record a budget notice")
            return
        if not first or self.notifier is None:
            return
        who = self.describe_user(user_id)
        text = (
            f"{who} reached the {cap.period} {cap.kind} cap: {amount(cap.kind, cap.spent)} of "
            f"{amount(cap.kind, cap.limit)}. Their requests are refused until it resets "
            f"{describe_reset(cap.window, self.clock())}. "
            f"Change it with /budget {user_id} {cap.period} AMOUNT."
        )
        try:
            task = asyncio.get_running_loop().create_task(self._send(self.owner_id, text))
        except RuntimeError:  # no running loop (a synchronous caller): the notice row still marks it
            log.warning("could not tell the owner (no event loop): %s", text)
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _send(self, chat_id: int, text: str) -> None:
        assert self.notifier is not None
        try:
            await self.notifier.send(chat_id, text)
        except Exception:
            log.exception("could not tell the owner that a user reached a cap")

    async def drain(self) -> None:
        """Wait for owner notices still being sent (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def describe_user(self, user_id: int, info: UserInfo | None = None) -> str:
        """'Ann (111)', or the bare id for a user the bot has not met."""
        info = info or self.queries.users([user_id]).get(user_id)
        name = (info.first_name or (f"@{info.username}" if info.username else None)) if info else None
        return f"{name} ({user_id})" if name else str(user_id)

    def set_cap(self, *, by: int, user_id: int, period: str, kind: str | None, limit: float | None) -> None:
        """Set (limit) or lift (None) a user's cap; `kind` None with limit None lifts both kinds."""
        if period not in PERIODS:
            raise ValueError(f"period must be one of {', '.join(PERIODS)}")
        if limit is not None and (limit < 0 or kind not in KINDS):
            raise ValueError("a cap needs a kind (cost or tokens) and a non-negative amount")
        for k in [kind] if kind else list(KINDS):
            assert k is not None
            self.queries.set_budget(user_id=user_id, period=period, kind=k, limit=limit, set_by=by)

    def reset_cap(self, *, user_id: int, period: str, kind: str | None) -> int:
        """Drop the owner's caps of a period (one kind or both) so the defaults apply again."""
        if period not in PERIODS:
            raise ValueError(f"period must be one of {', '.join(PERIODS)}")
        return self.queries.clear_budget(user_id=user_id, period=period, kind=kind)

    def budget_overrides(self) -> list[BudgetRow]:
        """Every owner-set cap."""
        return self.queries.budgets()

    # ------------------------------------------------------------------ reports

    def report(self, user_id: int, period: str = "today") -> UsageReport:
        """A user's usage in the current calendar `period` (today, week, month)."""
        w = window(period, self.clock(), self.timezone(user_id))
        rows = self.queries.model_usage(user_id, w.start, w.end)
        purposes: dict[str, PurposeLine] = {}
        models: dict[str, PurposeLine] = {}
        for r in rows:
            c = self.prices.cost(r.model, r.prompt_tokens, r.completion_tokens, r.cached_tokens)
            for line in (
                purposes.setdefault(r.purpose, PurposeLine(r.purpose)),
                models.setdefault(r.model, PurposeLine(r.model)),
            ):
                line.calls += r.calls
                line.tokens += r.prompt_tokens + r.completion_tokens
                if c is None:
                    line.cost_unknown = line.cost_unknown or bool(r.prompt_tokens or r.completion_tokens)
                else:
                    line.cost += c
        return UsageReport(
            user_id=user_id,
            window=w,
            spend=spend_of(rows, self.prices),
            prompt_tokens=sum(r.prompt_tokens for r in rows),
            completion_tokens=sum(r.completion_tokens for r in rows),
            cached_tokens=sum(r.cached_tokens for r in rows),
            llm_calls=sum(r.calls for r in rows),
            llm_errors=sum(r.errors for r in rows),
            purposes=sorted(purposes.values(), key=lambda p: (-p.tokens, p.purpose)),
            models=sorted(models.values(), key=lambda p: (-p.tokens, p.purpose)),
            activity=self.queries.activity(user_id, w.start, w.end),
            caps=self.cap_status(user_id),
        )

    def usage_over_time(
        self, user_id: int, *, period: str | None = None, days: int | None = None
    ) -> UsageSeries:
        """A user's tokens per purpose and cost per model per local day: over the calendar `period` (week,
        month; "today" per hour), or over the last `days` days up to today (the Mini App's 30)."""
        tz = self.timezone(user_id)
        now = self.clock()
        if days is not None:
            if not 1 <= days <= MAX_SERIES_DAYS:
                raise ValueError(f"days must be from 1 to {MAX_SERIES_DAYS}")
            today = window("today", now, tz)
            buckets = day_buckets(today.start.astimezone(tz).date() - timedelta(days=days - 1), days, tz)
            since, until = buckets.starts[0], today.end
        else:
            w = window(period or "today", now, tz)
            since, until = w.start, w.end
            if w.name == "today":
                buckets = hour_buckets(w.start, w.end, tz)
            else:
                first, last = w.start.astimezone(tz).date(), w.end.astimezone(tz).date()
                buckets = day_buckets(first, (last - first).days, tz)
        points = self.series.llm_calls(user_id, since, until) if self.series is not None else []
        return usage_series(points, buckets, self.prices)

    def usage_of_all(self, period: str = "today") -> AllUsage:
        """Every user's usage in the owner's current calendar `period`, and the total (`/usage all`)."""
        w = window(period, self.clock(), self.timezone(self.owner_id))
        ids = self.queries.active_users(w.start, w.end)
        infos = self.queries.users(ids)
        users: list[UserUsage] = []
        total_rows: list[ModelUsage] = []
        for uid in ids:
            rows = self.queries.model_usage(uid, w.start, w.end)
            total_rows.extend(rows)
            act = self.queries.activity(uid, w.start, w.end)
            reached = next((c for c in self.cap_status(uid) if c.reached), None)
            who = self.describe_user(uid, infos.get(uid))
            users.append(UserUsage(uid, who, spend_of(rows, self.prices), act.turns, reached))
        return AllUsage(w, users, spend_of(total_rows, self.prices), sum(u.turns for u in users))

    # ------------------------------------------------------------------ scheduled tasks

    def task_spend_this_month(self, user_id: int, schedule_ids: Sequence[int]) -> dict[int, float]:
        """Estimated USD each of the user's tasks spent this calendar month (the user's zone); {} without
        task accounting. What /reminders and the Mini App show per task."""
        return {} if self.tasks is None else self.tasks.spent_this_month(user_id, schedule_ids)

    def task_forecast(self, user_id: int, model: str, schedule_id: int | None = None) -> RunForecast:
        """What one run of a task (this one, given `schedule_id`) is expected to cost with `model`."""
        if self.tasks is None:
            return RunForecast(model, 0, 0, None, 0)
        return self.tasks.forecast(user_id, model, schedule_id)

    def task_cost_anomaly(
        self, user_id: int, schedule_id: int, firing_id: int, factor: float
    ) -> CostAnomaly | None:
        """The run when it cost more than `factor` times its task's median run, else None."""
        if self.tasks is None:
            return None
        return self.tasks.anomaly(user_id, schedule_id, firing_id, factor)
