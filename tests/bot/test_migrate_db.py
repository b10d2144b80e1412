"""`python -m bot migrate-db --to postgresql+psycopg://...`: a real SQLite database with a real turn and
memories, copied into a real PostgreSQL through the real entry point; recall works there, a re-run adds
nothing, new rows get new ids."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import func, select

from core_tools.memory.store import MemoryStore
from db.engine import make_engine, make_sessionmaker
from db.models import CodeJob, Memory, Message, Schedule, ScheduleFiring
from tests.support.embedders import TinyEmbedder
from tests.support.fakes.openai_api import FakeLLM, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, running_bot
from tests.support.postgres import TestPostgres
from tests.support.processes import bot_env, run_bot

pytestmark = pytest.mark.slow  # `python -m bot migrate-db` processes into PostgreSQL


@pytest.fixture
def target(postgres: TestPostgres) -> Iterator[str]:
    """An empty PostgreSQL database."""
    url = postgres.new_database(migrated=False)
    yield url
    postgres.drop_database(url)


async def test_migrate_db_copies_everything_and_is_safe_to_rerun(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, target: str
) -> None:
    llm.script(text("hello there"))
    async with running_bot(tmp_path, tg, llm) as h:  # a real turn: users, sessions, messages, usage rows
        tg.push_text(OWNER, "hi")
        await h.final_text(OWNER, "hello there")
        source_url = h.settings.database_url
    source = make_engine(source_url)
    store = MemoryStore(make_sessionmaker(source), source, TinyEmbedder())
    await store.reembed()  # the vector table for 8 dimensions
    await store.store(OWNER, "long", "Our dog is a beagle named Max")
    await store.store(OWNER, "long", "My brother Tom lives in Toronto")
    await store.store(7, "long", "Another user's beagle called Rex")
    store.embedder = None
    await store.store(OWNER, "short", "The plumber comes on Monday")  # no vector: embedder down
    # The later features' tables: a string id, JSON, booleans, a foreign key, times.
    fired = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)
    with make_sessionmaker(source)() as s, s.begin():
        job = CodeJob(
            id="job1", user_id=OWNER, chat_id=OWNER, task="plot", result={"stdout": "42", "ok": True}
        )
        schedule = Schedule(
            user_id=OWNER,
            chat_id=OWNER,
            kind="message",
            text="Water the plants",
            start_local="09:00",
            zone_used="UTC",
            next_fire_at=fired,
        )
        s.add_all([job, schedule])
        s.flush()
        s.add(
            ScheduleFiring(
                schedule_id=schedule.id,
                user_id=OWNER,
                chat_id=OWNER,
                due_at=fired,
                not_before=fired,
                snoozed=True,
            )
        )
    with make_sessionmaker(source)() as s:
        messages = s.execute(select(func.count()).select_from(Message)).scalar_one()
    source.dispose()
    assert messages >= 2

    env = bot_env(tmp_path, DATABASE_URL=source_url, OPENAI_API_KEY="sk-test")
    code, out, err = await run_bot(tmp_path, "migrate-db", "--to", target, env=env, timeout=120)
    assert code == 0, out + err
    assert "memories: 4 row(s) copied, the target has 4" in out
    assert f"messages: {messages} row(s) copied, the target has {messages}" in out
    assert "memories: vector index rebuilt for 8 dimensions" in out
    assert "memories: 4 re-indexed (3 with a vector)" in out
    assert "every count agrees" in out and "Traceback" not in out + err
    for table in ("code_jobs", "schedules", "schedule_firings"):
        assert f"{table}: 1 row(s) copied, the target has 1" in out

    pg = make_engine(target)
    try:
        with make_sessionmaker(pg)() as s:
            assert s.get(CodeJob, "job1").result == {"stdout": "42", "ok": True}  # type: ignore[union-attr]
            firing = s.execute(select(ScheduleFiring)).scalar_one()
            assert firing.snoozed is True and firing.resend is False and firing.due_at == fired
            assert s.execute(select(Schedule.text)).scalar_one() == "Water the plants"
        moved = MemoryStore(make_sessionmaker(pg), pg, TinyEmbedder())
        found = await moved.recall(OWNER, "beagle")
        assert [m["content"] for m in found][:1] == ["Our dog is a beagle named Max"]
        assert all("Rex" not in m["content"] for m in found)  # still per user
        moved.embedder = None  # keyword search over the generated words
        assert [m["content"] for m in await moved.recall(OWNER, "plumber")] == ["The plumber comes on Monday"]

        code, out, err = await run_bot(tmp_path, "migrate-db", "--to", target, env=env, timeout=120)
        assert code == 0, out + err
        assert "memories: 4 row(s) copied, the target has 4" in out  # nothing twice

        new = await moved.store(OWNER, "long", "I live in Berlin")  # ids continue after the copied ones
        with make_sessionmaker(pg)() as s:
            assert s.execute(select(func.count()).select_from(Memory)).scalar_one() == 5
            row = s.execute(select(Memory).where(Memory.public_id == new["memory"]["id"])).scalar_one()
            assert row.id > 4
    finally:
        pg.dispose()


async def test_migrate_db_refuses_what_it_cannot_do(tmp_path: Path) -> None:
    env = bot_env(tmp_path, DATABASE_URL=f"sqlite:///{tmp_path / 'a.db'}", OPENAI_API_KEY="sk-test")
    code, _, err = await run_bot(tmp_path, "migrate-db", "--to", f"sqlite:///{tmp_path / 'b.db'}", env=env)
    assert code == 2 and "--to must be a PostgreSQL URL" in err
    unreachable = "postgresql+psycopg://assistant:s3cretpw@127.0.0.1:9/assistant"
    code, out, err = await run_bot(tmp_path, "migrate-db", "--to", unreachable, env=env, timeout=60)
    assert code == 1 and "migrate-db failed: OperationalError" in err
    assert "s3cretpw" not in out + err and "Traceback" not in out + err
