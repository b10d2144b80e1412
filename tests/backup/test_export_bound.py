"""One `/export` per user at a time (issue 31 §15): each archive takes temporary disk space (eight at once
took 162 MB for 45 MB of files); a second request while one is being made is answered with one line. Built
with an event: the first export's building waits in its worker thread until the test lets it go."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from telegram.ext import CommandHandler

from bot.adapter.commands.data import EXPORT_BUSY, DataCommands
from tests.backup.test_backup_bot import documents
from tests.support.fakes.openai_api import FakeLLM, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, Harness, running_bot


def data_commands(h: Harness) -> DataCommands:
    """The running bot's /export handler object."""
    for handlers in h.app.handlers.values():
        for handler in handlers:
            if isinstance(handler, CommandHandler) and "export" in handler.commands:
                owner = handler.callback.__self__  # type: ignore[attr-defined]
                assert isinstance(owner, DataCommands)
                return owner
    raise AssertionError("no /export handler")


async def test_a_second_export_while_one_is_made_says_so_and_makes_none(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("hello owner"), text("hello friend"))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "hi")
        await h.final_text(OWNER, "hello owner")
        tg.push_text(FRIEND, "hi")
        await h.final_text(FRIEND, "hello friend")
        commands = data_commands(h)
        building, release = threading.Event(), threading.Event()
        real = commands._export

        def held(user_id: int, folder: Path) -> Any:
            if user_id == OWNER:
                building.set()
                release.wait()
            return real(user_id, folder)

        commands._export = held  # type: ignore[method-assign]
        try:
            tg.push_text(OWNER, "/export")
            await asyncio.to_thread(building.wait, 60)
            busy = await h.command(OWNER, "/export", "being made")
            assert busy == EXPORT_BUSY
            # Another user's export is not held up by it.
            tg.push_text(FRIEND, "/export")
            await tg.wait_for(lambda: documents(tg, FRIEND), what="the friend's archive")
        finally:
            release.set()
        await tg.wait_for(lambda: documents(tg, OWNER), what="the first archive")
        # Its handler ends after the upload (its temporary folder deleted): then it is no longer being made.
        await tg.wait_for(lambda: OWNER not in commands._exporting, what="the first export's end")
        tg.push_text(OWNER, "/export")  # once it was sent, a new one is made
        await tg.wait_for(lambda: len(documents(tg, OWNER)) == 2, what="the next archive")
    assert len(documents(tg, OWNER)) == 2 and len(documents(tg, FRIEND)) == 1
