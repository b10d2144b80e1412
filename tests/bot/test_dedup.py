"""An update is dropped as a duplicate only when it is one: the same bot's update id, seen within the window
in which Telegram can deliver it again (issue "Hold 2", item 2). Through the real application, polling the
fake Bot API, on each database."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import pytest

from tests.support.databases import both_databases
from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, running_bot

db_kind = both_databases()  # SQLite and PostgreSQL: the seen-updates upsert (db/replicas.py)
pytestmark = pytest.mark.usefixtures("bot_database")  # its bots run on the test's database

REAL_TOKEN = "7000000001:REAL-bot-token-after-the-test-one"
DROPPED = "was already handled; dropped"


def greetings(tg: FakeTelegram) -> list[str]:
    """The answers to /start in the owner's chat."""
    return [t for t in tg.sent_texts(OWNER) if t.startswith("Hello, Ann!")]


async def test_the_same_update_id_after_a_token_switch_is_answered_and_a_true_duplicate_is_not(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.adapter.app")

    def dropped() -> list[str]:
        return [r.getMessage() for r in caplog.records if DROPPED in r.getMessage()]

    # The operator tries the bot with a test bot's token first.
    async with running_bot(tmp_path, tg, llm):
        first = tg.push_text(OWNER, "/start")
        delivered = copy.deepcopy(tg.updates[-1])
        await tg.wait_for(lambda: greetings(tg), what="the test bot's answer to /start")
        # Telegram delivers the same update again (its 200 got lost): answered once only.
        assert tg.push_update(delivered) == first
        await tg.wait_for(dropped, what="the second delivery dropped")
        assert len(greetings(tg)) == 1

    # Then switches to the real bot's token on the same database: that bot's update ids start over, and its
    # first update has the number the test bot's had.
    async with (
        FakeTelegram(token=REAL_TOKEN) as real,
        running_bot(tmp_path, real, llm, telegram_bot_token=REAL_TOKEN),
    ):
        assert real.push_text(OWNER, "/start") == first
        await real.wait_for(lambda: greetings(real), what="the real bot's answer to /start")
        assert len(dropped()) == 1
