"""Check-ins with two `python -m bot` replicas on one PostgreSQL: a due check-in is sent exactly once, by
the replica holding the reminders' lease, even when both got the /checkin and both look at the schedules."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest
from sqlalchemy import create_engine
from sqlalchemy import text as sql

from tests.replicas.harness import USERS, Cluster, text_update
from tests.support.databases import postgresql_only
from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.telegram_api import FakeTelegram

pytestmark = [pytest.mark.slow, postgresql_only]  # two bot processes on PostgreSQL


def execute(cluster: Cluster, query: str, **params: object) -> None:
    engine = create_engine(cluster.database_url)
    try:
        with engine.begin() as conn:
            conn.execute(sql(query), params)
    finally:
        engine.dispose()


async def test_a_due_check_in_is_sent_once_by_two_replicas(
    cluster: Cluster, tg: FakeTelegram, llm: FakeLLM
) -> None:
    chat = USERS[2]
    await cluster.start(2)
    now = datetime.now(UTC).replace(tzinfo=None)
    execute(
        cluster,
        "INSERT INTO memories (public_id, user_id, layer, category, content, certainty, created_at,"
        " updated_at, expires_at, origin, untrusted) VALUES (:p, :u, 'mid', 'goal', 'Renew the passport',"
        " 0.8, :n, :n, :e, 'user', false)",
        p=str(uuid4()),
        u=chat,
        n=now,
        e=now + timedelta(days=2),
    )
    update = text_update(tg, chat, "/checkin daily 09:00")
    # The same /checkin to both (a retrying Telegram): it is handled once.
    assert await cluster.deliver(update, cluster.replicas) == [200, 200]

    def set_up() -> list[str]:
        return [t for t in tg.sent_texts(chat) if t.startswith("Check-in set")]

    await tg.wait_for(set_up, timeout=60, what="the set-up")
    # Its time comes in a few seconds (moved in the database: the replicas run on the real clock).
    execute(
        cluster,
        "UPDATE schedules SET next_fire_at = :t WHERE kind = 'checkin' AND user_id = :u",
        t=datetime.now(UTC).replace(tzinfo=None) + timedelta(seconds=3),
        u=chat,
    )

    def checkins() -> list[str]:
        return [t for t in tg.sent_texts(chat) if t.startswith("🔔 Check-in")]

    await tg.wait_for(checkins, timeout=60, what="the check-in")

    def firings() -> list[str]:
        rows = cluster.rows(
            "SELECT f.status FROM schedule_firings f JOIN schedules s ON s.id = f.schedule_id"
            " WHERE s.kind = 'checkin' AND s.user_id = :u",
            u=chat,
        )
        return [str(r[0]) for r in rows]

    await tg.wait_for(lambda: firings() == ["sent"], timeout=60, what="one firing, sent")
    # Both replicas look again (each looks every few seconds): still one message, one firing, no LLM request.
    others = len(tg.sent_texts(chat))
    # Longer than a look (LOOK_S = 5 s); a slow machine only makes this check of "nothing more" weaker.
    await asyncio.sleep(6)
    assert len(checkins()) == 1 and firings() == ["sent"]
    assert len(set_up()) == 1  # the /checkin delivered twice was answered once
    assert len(tg.sent_texts(chat)) == others
    assert "Renew the passport" in checkins()[0]
    assert not any("Renew the passport" in str(r) for r in llm.requests)
