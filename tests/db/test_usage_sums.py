"""A task run's costs (db/task_costs.py) and the usage report (db/usage.py) sum LLM calls the same way:
one statement's sums, so a request the user stopped is not a failure in either."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Engine

from db.engine import make_sessionmaker
from db.models import utcnow
from db.task_costs import TaskCosts
from db.usage import LLMCallRecord, UsageLog, UsageQueries


def test_a_stopped_request_is_not_a_failure_in_a_task_runs_costs_or_the_usage_report(engine: Engine) -> None:
    sm = make_sessionmaker(engine)
    log = UsageLog(sm, engine)
    for error in (None, "stopped", "timeout"):
        call = LLMCallRecord(1, None, "task", "m", prompt_tokens=10, error=error, schedule_id=3, firing_id=9)
        log.record_llm_call(call)
    run = TaskCosts(sm).run(9)
    assert run is not None and run.schedule_id == 3
    [usage] = run.rows
    assert (usage.model, usage.calls, usage.prompt_tokens, usage.errors) == ("m", 3, 30, 1)
    now = utcnow()
    [reported] = UsageQueries(sm, engine).model_usage(1, now - timedelta(hours=1), now + timedelta(hours=1))
    assert (reported.purpose, reported.calls, reported.errors) == ("task", 3, 1)
