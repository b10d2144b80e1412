"""Usage per day (the app's charts): the user's own days, across a DST change too, by purpose and model."""

from __future__ import annotations

from datetime import UTC, date, datetime

from sqlalchemy import Engine, insert

from core_tools.usage.daily import daily_usage
from core_tools.usage.prices import ModelPrice
from core_tools.usage.service import UsageService
from db.engine import make_sessionmaker
from db.models import LLMCall, User
from db.usage import UsageQueries
from tests.support.databases import both_databases

db_kind = both_databases()  # SQLite and PostgreSQL: local days are grouped in dialect SQL

USER, OTHER = 7, 8


def test_days_are_the_users_local_days_across_a_dst_change(engine: Engine) -> None:
    sessions = make_sessionmaker(engine)
    with sessions.begin() as s:
        s.add(User(id=USER, timezone="Europe/Berlin"))
    # Berlin leaves summer time on 26 Oct 2025 (that day has 25 hours).
    calls = [
        (USER, "chat", "m1", 100, datetime(2025, 10, 25, 21, 30, tzinfo=UTC)),  # 23:30 on the 25th in Berlin
        (USER, "chat", "m1", 200, datetime(2025, 10, 25, 22, 30, tzinfo=UTC)),  # 00:30 on the 26th (CEST)
        (USER, "summary", "m2", 400, datetime(2025, 10, 26, 22, 59, tzinfo=UTC)),  # 23:59 on the 26th (CET)
        (USER, "chat", "m1", 800, datetime(2025, 10, 26, 23, 0, tzinfo=UTC)),  # 00:00 on the 27th
        (USER, "chat", "m1", 1600, datetime(2025, 10, 20, 12, 0, tzinfo=UTC)),  # before the window
        (OTHER, "chat", "m1", 3200, datetime(2025, 10, 26, 12, 0, tzinfo=UTC)),  # someone else's
    ]
    with engine.begin() as conn:
        for user, purpose, model, tokens, at in calls:
            conn.execute(
                insert(LLMCall).values(
                    user_id=user,
                    purpose=purpose,
                    model=model,
                    prompt_tokens=tokens,
                    completion_tokens=0,
                    cached_tokens=0,
                    tokens_estimated=False,
                    duration_ms=1,
                    created_at=at,
                )
            )
    service = UsageService(
        UsageQueries(sessions, engine),
        prices={"m1": ModelPrice(1.0, 1.0)},  # m2 has no price
        clock=lambda: datetime(2025, 10, 27, 10, 0, tzinfo=UTC),
    )
    daily = daily_usage(service, USER, 3)
    assert daily.timezone == "Europe/Berlin"
    assert daily.days == [date(2025, 10, 25), date(2025, 10, 26), date(2025, 10, 27)]
    got = [(line.day, line.purpose, line.model, line.tokens, line.cost) for line in daily.lines]
    assert got == [
        (0, "chat", "m1", 100, 100 / 1e6),
        (1, "chat", "m1", 200, 200 / 1e6),
        (1, "summary", "m2", 400, None),
        (2, "chat", "m1", 800, 800 / 1e6),
    ]
