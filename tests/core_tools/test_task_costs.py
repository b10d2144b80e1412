"""Task costs below the bot: a task's monthly limit held like the caps (parallel requests too), calls
attributed to the run they were made for, forecasts, runs in a month, unusual runs. Real databases (SQLite
and PostgreSQL), the real openai client against the fake LLM."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from core_tools.errors import BudgetExceeded, TaskBudgetExceeded
from core_tools.llm import LLMClient
from core_tools.schedule.costs import forecast_view, runs_within, usd
from core_tools.schedule.rules import Repeat, Spec
from core_tools.types import ChatMessage
from core_tools.usage.prices import ModelPrice, PriceTable
from core_tools.usage.service import UsageService
from db.attribution import TaskRun, current_task_run, running_task
from db.models import LLMCall
from db.task_costs import TaskCosts
from db.usage import LLMCallRecord, UsageLog, UsageQueries
from tests.support.databases import both_databases
from tests.support.fakes.openai_api import FakeLLM, text

db_kind = both_databases()  # SQLite and PostgreSQL: a task's spend this month sums by dialect SQL

USER = 7
PRICES = {"fake-model": ModelPrice(1.0, 2.0), "free-model": ModelPrice(0.0, 0.0)}
UTC_ZONE = ZoneInfo("UTC")


def service(sm: sessionmaker[Session], engine: Engine, now: datetime | None = None) -> UsageService:
    return UsageService(
        UsageQueries(sm, engine),
        prices=PRICES,
        clock=lambda: now or datetime.now(UTC),
        task_costs=TaskCosts(sm),
    )


def record(
    sm: sessionmaker[Session],
    engine: Engine,
    run: TaskRun | None,
    prompt: int,
    completion: int,
    model: str = "fake-model",
) -> None:
    """One recorded LLM call, made inside `run` (or outside any task run)."""
    log = UsageLog(sm, engine)
    record = LLMCallRecord(
        user_id=USER,
        session_id=None,
        purpose="scheduled",
        model=model,
        prompt_tokens=prompt,
        completion_tokens=completion,
        duration_ms=5,
    )
    if run is None:
        log.record_llm_call(record)
    else:
        with running_task(run):
            log.record_llm_call(record)


def test_a_task_limit_holds_reservations_like_a_cap(
    engine: Engine, db_sessions: sessionmaker[Session]
) -> None:
    svc = service(db_sessions, engine)
    run = TaskRun(USER, schedule_id=3, firing_id=30, max_cost_per_month=0.002)
    outside = svc.reserve(USER, "chat", "fake-model", 10**6, 0)  # no task run: its limit does not apply
    with running_task(run):
        first = svc.reserve(USER, "scheduled", "fake-model", 500, 250)  # $0.001 held
        second = svc.reserve(USER, "scheduled", "fake-model", 500, 250)  # $0.001 + $0.001 held: at the limit
        with pytest.raises(TaskBudgetExceeded) as refused:
            svc.reserve(USER, "scheduled", "fake-model", 1, 1)
        assert str(refused.value).startswith("Scheduled task #3 reached its limit of $0.0020 a month: $0 is")
        assert "(and $0.0020 reserved by requests still running)" in str(refused.value)
        with pytest.raises(BudgetExceeded):
            svc.check(USER, "scheduled")  # the pre-run check sees the reservations too
        assert svc.over_budget(USER) is not None  # and the agent stops using tools mid-turn
        svc.reserve(USER, "final", "fake-model", 1, 1).release()  # a closing answer is never refused
        first.release()  # its request is recorded (below) and its estimate given back
        record(db_sessions, engine, run, 500, 250)
        with pytest.raises(TaskBudgetExceeded, match=r"\$0\.0010 is spent this month"):
            svc.reserve(USER, "scheduled", "fake-model", 1, 1)  # spent + still reserved
        second.release()
        svc.reserve(USER, "scheduled", "fake-model", 1, 1).release()
        record(db_sessions, engine, run, 500, 250)
        with pytest.raises(TaskBudgetExceeded, match=r"\$0\.0020 is spent this month\. It runs again from"):
            svc.check(USER, "scheduled")
    outside.release()
    svc.check(USER, "chat")  # the user's other requests are not limited by the task
    assert svc.over_budget(USER) is None
    other = TaskRun(USER, schedule_id=4, firing_id=40, max_cost_per_month=0.002)
    with running_task(other):
        svc.check(USER, "scheduled")  # another task of the user has its own limit
    assert svc.task_spend_this_month(USER, [3, 4, 5]) == {3: pytest.approx(0.002), 4: 0.0, 5: 0.0}


async def test_parallel_requests_of_a_task_run_overshoot_its_limit_by_at_most_one_and_are_attributed(
    db_sessions: sessionmaker[Session], engine: Engine, llm: FakeLLM
) -> None:
    svc = service(db_sessions, engine)
    client = LLMClient(
        base_url=llm.base_url,
        api_key="sk-test",
        model="fake-model",
        max_retries=0,
        recorder=UsageLog(db_sessions, engine),
        budget=svc,
        max_completion_tokens=50,
    )
    llm.default = text("w" * 160, delay=0.2)
    run = TaskRun(USER, schedule_id=9, firing_id=90, max_cost_per_month=0.0002)
    msgs = [ChatMessage("user", "hello")]
    with running_task(run):
        out = await asyncio.gather(
            *[client.complete(msgs, purpose="scheduled", user_id=USER) for _ in range(20)],
            return_exceptions=True,
        )
    await client.complete(msgs, purpose="chat", user_id=USER)  # a chat request beside the task
    await client.close()
    refused = [o for o in out if isinstance(o, TaskBudgetExceeded)]
    assert refused and all(isinstance(o, TaskBudgetExceeded) or not isinstance(o, Exception) for o in out)
    with db_sessions() as s:
        rows = s.execute(
            select(
                LLMCall.purpose,
                LLMCall.schedule_id,
                LLMCall.firing_id,
                LLMCall.prompt_tokens,
                LLMCall.completion_tokens,
            )
        ).all()
    task_rows = [r for r in rows if r.purpose == "scheduled"]
    assert len(task_rows) == 20 - len(refused) == len(llm.requests) - 1
    assert {(r.schedule_id, r.firing_id) for r in task_rows} == {(9, 90)}
    assert [(r.schedule_id, r.firing_id) for r in rows if r.purpose == "chat"] == [(None, None)]
    costs = [
        PriceTable(PRICES).cost("fake-model", r.prompt_tokens, r.completion_tokens) or 0.0 for r in task_rows
    ]
    assert sum(costs) <= 0.0002 + max(costs)
    assert current_task_run() is None


def test_the_forecast_is_the_median_of_task_runs_priced_at_the_model(
    engine: Engine,
    db_sessions: sessionmaker[Session],
) -> None:
    svc = service(db_sessions, engine)
    default = svc.task_forecast(USER, "fake-model")
    assert (default.prompt_tokens, default.completion_tokens, default.runs) == (6000, 600, 0)
    assert default.cost == pytest.approx(0.0072)
    record(db_sessions, engine, None, 10**6, 10**6)  # a chat call: not a task run
    for firing, (prompt, completion) in enumerate([(1000, 100), (3000, 50), (2000, 900)], start=1):
        run = TaskRun(USER, schedule_id=1 if firing < 3 else 2, firing_id=firing)
        record(db_sessions, engine, run, prompt // 2, completion)
        record(db_sessions, engine, run, prompt - prompt // 2, 0)  # a run of two requests
    users = svc.task_forecast(USER, "fake-model")
    assert (users.prompt_tokens, users.completion_tokens, users.runs, users.own) == (2000, 100, 3, False)
    assert users.cost == pytest.approx((2000 * 1.0 + 100 * 2.0) / 1e6)
    assert users.basis == "the median of your last 3 task runs at fake-model's price"
    own = svc.task_forecast(USER, "fake-model", schedule_id=1)  # an update: the task's own runs
    assert (own.prompt_tokens, own.completion_tokens, own.runs, own.own) == (2000, 75, 2, True)
    assert svc.task_forecast(USER, "unknown-model").cost is None
    unpriced = forecast_view(svc.task_forecast(USER, "unknown-model"), 30, True, None)
    assert unpriced["text"].startswith("Forecast cost: unknown, unknown-model has no price")
    once = forecast_view(users, 1, False, None)
    assert once["text"].startswith("Forecast cost: about $0.0022 for its one run, from the median")


def test_a_run_is_unusual_against_the_median_of_at_least_three_earlier_runs(
    engine: Engine,
    db_sessions: sessionmaker[Session],
) -> None:
    svc = service(db_sessions, engine)
    for firing, completion in enumerate([100, 120, 90], start=1):
        record(db_sessions, engine, TaskRun(USER, 1, firing), 1000, completion)
        if firing < 3:  # two earlier runs say too little
            assert svc.task_cost_anomaly(USER, 1, firing, 5) is None
    record(db_sessions, engine, TaskRun(USER, 1, 4), 20_000, 300)  # $0.0206 against a median of $0.0012
    anomaly = svc.task_cost_anomaly(USER, 1, 4, 5)
    assert anomaly is not None and anomaly.runs == 3 and anomaly.unit == "usd"
    assert anomaly.factor == pytest.approx(0.0206 / 0.0012)
    assert svc.task_cost_anomaly(USER, 1, 4, 20) is None  # under 20 times: usual enough
    assert svc.task_cost_anomaly(USER, 1, 4, 0) is None  # 0: the check is off
    assert svc.task_cost_anomaly(USER, 1, 2, 5) is None  # an ordinary run
    # A model without a price: compared in tokens.
    for firing in (11, 12, 13):
        record(db_sessions, engine, TaskRun(USER, 2, firing), 100, 10, model="local-llm")
    record(db_sessions, engine, TaskRun(USER, 2, 14), 1000, 10, model="local-llm")
    tokens = svc.task_cost_anomaly(USER, 2, 14, 5)
    assert tokens is not None and tokens.unit == "tokens" and tokens.describe().startswith("1,010 tokens")


def test_runs_in_the_next_30_days_and_small_amounts() -> None:
    now = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
    start = datetime(2026, 3, 10, 13, 0)
    daily = Spec(start, Repeat("rrule", "FREQ=DAILY"), None, None)
    assert runs_within(daily, UTC_ZONE, now, 0) == 30
    assert runs_within(Spec(start, Repeat("rrule", "FREQ=DAILY"), None, 10), UTC_ZONE, now, 4) == 6
    until = now + timedelta(days=5)
    assert runs_within(Spec(start, Repeat("rrule", "FREQ=DAILY"), until, None), UTC_ZONE, now, 0) == 5
    every_15 = Spec(start.replace(hour=12), Repeat("cron", "*/15 * * * *"), None, None)
    assert runs_within(every_15, UTC_ZONE, now, 0) == 30 * 96
    assert runs_within(Spec(start, None, None, None), UTC_ZONE, now, 0) == 1
    assert [usd(v) for v in (0, 0.000021, 0.00012, 0.5, 12.345)] == [
        "$0",
        "$0.000021",
        "$0.0001",
        "$0.5000",
        "$12.35",
    ]
