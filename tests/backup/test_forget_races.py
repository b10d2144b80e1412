"""`/forget_me` while the user's work is in flight (issue 31 §5): a memory extraction reading their last
message, an answer still streaming. The erase stops or waits for it, and nothing of theirs is written after
it. Built with events: the fake LLM holds the request open until the test lets it go."""

from __future__ import annotations

import asyncio
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from tests.backup.test_backup_bot import BIG, rows_naming
from tests.support.fakes.openai_api import FakeLLM, Step, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, Harness, running_bot

pytestmark = pytest.mark.usefixtures("bot_database")


def confirmation_id(tg: FakeTelegram, chat_id: int) -> int:
    """The message id of the erase's confirmation (the one with the buttons)."""
    return next(
        int(m["message_id"]) for m in tg.messages.get(chat_id, []) if "cannot be undone" in str(m.get("text"))
    )


def left_of(h: Harness, user_id: int) -> dict[str, int]:
    """What of the user is in the running bot's database (the chat's lease, which process drives it, is
    the process's own)."""
    found = rows_naming(h.settings.database_url, user_id)
    return {k: n for k, n in found.items() if not k.startswith("chat_leases.")}


async def erase(h: Harness, user_id: int) -> str:
    """/forget_me and its button, as the user; the answer."""
    h.tg.push_text(user_id, "/forget_me")
    await h.final_text(user_id, "cannot be undone")
    h.tg.push_callback(user_id, f"forget:yes:{user_id}", message_id=confirmation_id(h.tg, user_id))
    return await h.final_text(user_id, "Done. I deleted everything")


async def test_an_extraction_in_flight_writes_nothing_after_the_erase(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    asked, release = asyncio.Event(), asyncio.Event()

    async def extraction(request: dict[str, Any]) -> Step:
        asked.set()  # the extraction read the message and waits on the model: the erase comes now
        await release.wait()
        memory = {"content": "Big lives in Paris", "layer": "long", "category": "fact", "message": 1}
        return text(json.dumps({"memories": [memory]}))

    async def route(request: dict[str, Any]) -> Step:
        # The extraction may start while the turn still runs (a delay of 0): each request by what it is.
        if "long-term memory" in str(request["messages"][0]["content"]):
            return await extraction(request)
        return text("Paris, nice.")

    llm.script(route, route)
    async with running_bot(
        tmp_path, tg, llm, allowed_user_ids=f"{OWNER},{BIG}", memory_extract_delay_s=0
    ) as h:
        tg.push_text(BIG, "I live in Paris")
        await h.final_text(BIG, "Paris, nice.")
        await asyncio.wait_for(asked.wait(), 60)
        done = await erase(h, BIG)
        assert "messages" in done
        release.set()  # the model answers now: too late, the extraction was stopped
        await h.services.extractor.idle(BIG)
        assert left_of(h, BIG) == {}
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_an_answer_streaming_during_the_erase_stores_nothing_after_it(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    hold = asyncio.Event()
    llm.script(text("Let me think about that at length", hold=hold), text("hello again"))
    async with running_bot(tmp_path, tg, llm, allowed_user_ids=f"{OWNER},{BIG}", memory_extract=False) as h:
        runner = h.app.bot_data.runner
        tg.push_text(BIG, "tell me a long story")
        await h.final_text(BIG, "at length")  # streamed, the stream held open: the turn runs
        assert runner.running() == 1
        await erase(h, BIG)
        hold.set()
        # The stopped turn has ended before the erase ran: nothing of it is written afterwards.
        assert runner.running() == 0
        assert left_of(h, BIG) == {}
        tg.push_text(BIG, "hi")  # and the bot still serves them, from nothing
        await h.final_text(BIG, "hello again")
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors
