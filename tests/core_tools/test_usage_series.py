"""Usage over time (the charts' data): buckets are the user's local days or hours, DST days included; the
largest series are kept and the rest is "other". Real databases (SQLite and PostgreSQL)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from core_tools.usage.prices import ModelPrice
from core_tools.usage.service import UsageService
from db.models import LLMCall, User
from db.series import Series
from db.usage import UsageQueries
from tests.support.databases import both_databases

db_kind = both_databases()  # SQLite and PostgreSQL: the series group by local day and hour in dialect SQL

USER = 7


def add(sm: sessionmaker[Session], at: datetime, purpose: str, model: str = "m", tokens: int = 100) -> None:
    with sm.begin() as s:
        s.add(
            LLMCall(
                user_id=USER,
                purpose=purpose,
                model=model,
                prompt_tokens=tokens,
                completion_tokens=0,
                duration_ms=1,
                created_at=at,
            )
        )


def service(sm: sessionmaker[Session], engine: Engine, now: datetime) -> UsageService:
    with sm.begin() as s:
        s.add(User(id=USER, timezone="Europe/Berlin"))
    return UsageService(
        UsageQueries(sm, engine), prices={"m": ModelPrice(1.0, 0.0)}, clock=lambda: now, series=Series(sm)
    )


def test_days_and_hours_in_the_users_zone(engine: Engine, db_sessions: sessionmaker[Session]) -> None:
    now = datetime(2026, 3, 29, 20, 0, tzinfo=UTC)  # Sunday; Berlin's clocks went forward at 01:00 UTC
    svc = service(db_sessions, engine, now)
    add(db_sessions, datetime(2026, 3, 28, 23, 30, tzinfo=UTC), "chat")  # 29 Mar 00:30 in Berlin
    add(db_sessions, datetime(2026, 3, 28, 22, 30, tzinfo=UTC), "chat")  # 28 Mar 23:30 in Berlin
    add(db_sessions, datetime(2026, 3, 29, 1, 30, tzinfo=UTC), "final", tokens=50)  # 03:30 CEST
    add(db_sessions, datetime(2026, 3, 29, 10, 0, tzinfo=UTC), "chat", model="unpriced")
    week = svc.usage_over_time(USER, period="week")  # Mon 23 to Sun 29 March
    assert week.buckets.labels() == [f"{d} Mar" for d in range(23, 30)]
    assert week.tokens_by_purpose == {"chat": [0, 0, 0, 0, 0, 100, 200], "final": [0] * 6 + [50]}
    assert week.cost_by_model["m"][5:] == [pytest.approx(0.0001), pytest.approx(0.00015)]
    assert week.unpriced_models == ("unpriced",)
    today = svc.usage_over_time(USER, period="today")
    assert len(today.buckets.starts) == 23  # the DST day has 23 hours
    assert today.buckets.labels()[:4] == ["00", "01", "03", "04"]
    assert today.tokens_by_purpose["chat"][0] == 100 and today.tokens_by_purpose["final"][2] == 50
    thirty = svc.usage_over_time(USER, days=30)
    assert len(thirty.buckets.starts) == 30 and thirty.buckets.labels()[-1] == "29 Mar"
    assert sum(thirty.tokens_by_purpose["chat"]) == 300
    with pytest.raises(ValueError):
        svc.usage_over_time(USER, days=0)


def test_the_largest_series_are_kept_and_the_rest_is_other(
    engine: Engine, db_sessions: sessionmaker[Session]
) -> None:
    now = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)
    svc = service(db_sessions, engine, now)
    for i, purpose in enumerate(["a", "b", "c", "d", "e", "f", "g"]):
        add(db_sessions, now - timedelta(hours=1), purpose, tokens=100 * (i + 1))
    series = svc.usage_over_time(USER, period="month")
    assert list(series.tokens_by_purpose) == ["g", "f", "e", "d", "c", "other"]
    assert sum(series.tokens_by_purpose["other"]) == 100 + 200
    assert not series.empty and svc.usage_over_time(USER, period="today").buckets.unit == "hour"
