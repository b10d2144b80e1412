"""The streamed preview and the final answer are one message, however the two meet."""

from __future__ import annotations

import asyncio
from typing import Any

from telegram import Bot

from bot.adapter.streaming import StreamingReply
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, TOKEN


async def test_an_answer_that_ends_while_its_preview_is_being_sent_is_shown_once(tg: FakeTelegram) -> None:
    # The preview's sendMessage has reached Telegram (which stores it) when the answer ends: the final text
    # must go into that message, not into a second one beside it.
    arrived = asyncio.Event()
    seen: list[int] = []

    def first_send(params: dict[str, Any]) -> bool:
        seen.append(1)
        arrived.set()
        return len(seen) == 1  # only the preview's send is slow

    tg.fail_when("sendMessage", first_send, error="hang", hang=1.0)
    async with Bot(TOKEN, base_url=tg.base_url) as bot:
        reply = StreamingReply(bot, OWNER, min_interval=0.05)
        await reply.text("The answer")
        await asyncio.wait_for(arrived.wait(), 10)  # the preview is on its way
        ids = await reply.finish("The answer, whole.")
        await tg.wait_for(lambda: len(tg.calls_to("sendMessage")) == len(seen), what="every send answered")
    assert tg.sent_texts(OWNER) == ["The answer, whole."]
    assert len(ids) == 1
