"""A plain text message's update is recorded as seen in the transaction that queues it (bot/runtime/queue.py),
not before: delivered again it is still answered once, and a stranger's message delivered again is still
refused once. Through the real application, polling the fake Bot API, on each database."""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import pytest
from sqlalchemy import func, select

from db.models import InboxMessage, Message
from tests.support.databases import both_databases
from tests.support.fakes.openai_api import FakeLLM, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, STRANGER, running_bot

db_kind = both_databases()  # SQLite and PostgreSQL: dedup in the queue's transaction is dialect SQL
pytestmark = pytest.mark.usefixtures("bot_database")  # its bots run on the test's database

DROPPED = "was already handled; dropped"


async def test_a_text_message_delivered_twice_is_stored_and_answered_once(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.runtime.runner")
    llm.script(text("Lisbon has trams."), text("Porto has bridges."))
    async with running_bot(tmp_path, tg, llm) as h:
        first = tg.push_text(OWNER, "Tell me about Lisbon")
        delivered = copy.deepcopy(tg.updates[-1])
        await h.final_text(OWNER, "Lisbon has trams.")
        assert tg.push_update(delivered) == first  # Telegram delivers it again (its 200 got lost)
        await tg.wait_for(
            lambda: any(DROPPED in r.getMessage() for r in caplog.records), what="the second delivery dropped"
        )
        # The next message is answered as the next turn: nothing of the duplicate waits or was stored.
        tg.push_text(OWNER, "And Porto?")
        await h.final_text(OWNER, "Porto has bridges.")
        with h.services.engine.connect() as conn:
            stored = conn.execute(
                select(Message.content).where(Message.role == "user").order_by(Message.id)
            ).scalars()
            assert list(stored) == ["Tell me about Lisbon", "And Porto?"]
            assert conn.execute(select(func.count()).select_from(InboxMessage)).scalar() == 0
        assert [t for t in tg.sent_texts(OWNER) if t == "Lisbon has trams."] == ["Lisbon has trams."]
        assert len(llm.requests) == 2


async def test_a_strangers_message_delivered_twice_is_refused_once(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.adapter.app")

    def refusals() -> list[str]:
        return [t for t in tg.sent_texts(STRANGER) if "not on its list of allowed users" in t]

    async with running_bot(tmp_path, tg, llm):
        first = tg.push_text(STRANGER, "hello?")
        delivered = copy.deepcopy(tg.updates[-1])
        await tg.wait_for(refusals, what="the refusal")
        assert tg.push_update(delivered) == first
        await tg.wait_for(
            lambda: any(DROPPED in r.getMessage() for r in caplog.records), what="the second delivery dropped"
        )
        assert len(refusals()) == 1
    assert llm.requests == []
