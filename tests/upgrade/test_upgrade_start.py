"""The start path: `python -m bot` on a database behind this code's migrations goes through the checked
upgrade (a backup, the copy's self-test, then the live database) and serves; the owner's /help shows the
version and when it was upgraded; `rollback` refuses while that bot runs and works once it stopped."""

from __future__ import annotations

from pathlib import Path

import pytest

from db.migrate import head_revision
from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER
from tests.support.processes import bot_process, fake_env, run_bot
from tests.upgrade.helpers import PREVIOUS, backups_in, make_old_database, upgrade_env

pytestmark = pytest.mark.slow  # a `python -m bot` process that upgrades its database at start


async def test_a_bot_started_on_a_behind_database_upgrades_it_checked_then_serves(
    db_kind: str, tmp_path: Path, request: pytest.FixtureRequest, tg: FakeTelegram, llm: FakeLLM
) -> None:
    db = await make_old_database(db_kind, tmp_path, request)
    before = db.counts()
    env = fake_env(
        tmp_path, tg, llm, db.url, MEDIA_DIR=str(db.media), BACKUP_DIR=str(db.backups), LOG_LEVEL="INFO"
    )
    async with bot_process(tmp_path, env) as bot:
        await tg.wait_for_call("getUpdates", timeout=240)
        assert db.revision() == head_revision(), bot.tail()
        [manifest] = backups_in(db.backups)
        assert "upgraded the database from" in bot.log(), bot.tail()
        tg.push_text(OWNER, "/help")
        [shown] = await tg.wait_for(lambda: [t for t in tg.sent_texts(OWNER) if "Commands:" in t], 60)
        first = shown.splitlines()[0]
        assert first.startswith("Version 0.") and ", upgraded 20" in first and "UTC" in first, shown
        assert len(llm.requests) == 0  # the self-test's turn asked no provider

        code, out, err = await run_bot(tmp_path, "rollback", env=upgrade_env(tmp_path, db))
        assert code == 1 and "Rollback refused" in err and "running" in err, out + err
        assert db.revision() == head_revision()
        assert await bot.stop() == 0

    code, out, err = await run_bot(tmp_path, "rollback", env=upgrade_env(tmp_path, db), timeout=240)
    assert code == 0, out + err
    assert db.revision() == PREVIOUS and db.counts() == before
    assert manifest.parent.name in out
