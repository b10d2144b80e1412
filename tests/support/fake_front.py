"""`python -m tests.support.fake_front DATABASE_URL LLM_URL`: the turn runtime driving one turn, a burst and a
/retry through a front end of a few lines (no Telegram, no terminal), printing what it showed as JSON, and
whether `telegram` was ever imported. Run as a process by tests/bot/test_runtime_front.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from bot.config.settings import Settings
from bot.process.wiring import build_services
from bot.runtime.queue import Incoming
from bot.runtime.runner import TurnRunner
from core_tools.agent import TurnResult
from db.runtime import Entry
from db.speakers import Speaker

USER = 7


class Reply:
    """A turn's reply that keeps what it was shown."""

    def __init__(self, shown: list[dict[str, Any]]) -> None:
        self.log = shown
        self.last = ""

    @property
    def shown(self) -> bool:
        return bool(self.last)

    async def text(self, partial: str) -> None:
        self.last = partial

    async def status(self, line: str) -> None:
        return None

    async def end(self, task: asyncio.Task[TurnResult], batch: Sequence[Incoming], info_button: bool) -> None:
        answer = None if task.cancelled() or task.exception() else task.result().text
        self.log.append({"messages": [b.text for b in batch], "answer": answer})


class Front:
    """The smallest ChatFront: a list of what each turn showed."""

    def __init__(self) -> None:
        self.shown: list[dict[str, Any]] = []

    def reply(self, head: Incoming, number: int, guard: Callable[[], Awaitable[bool]]) -> Reply:
        return Reply(self.shown)

    def typing(self, chat_id: int, last_sent: float | None = None) -> AbstractAsyncContextManager[object]:
        return contextlib.nullcontext()

    async def tell(self, chat_id: int, text: str) -> None:
        self.shown.append({"told": text})


def message(text: str) -> Incoming:
    return Incoming(Entry(Speaker(USER, USER, "private", "Ann"), text))


async def main(database_url: str, llm_url: str) -> None:
    settings = Settings(  # type: ignore[call-arg]
        _env_file=None,
        openai_api_key="sk-test",
        openai_base_url=llm_url,
        llm_max_retries=0,
        database_url=database_url,
        allowed_user_ids=[USER],
        memory_extract=False,
        code_python_env="",
    )
    services = build_services(settings)
    front = Front()
    runner = TurnRunner(services.agent, services.conversations, services.code, services.replica.chats, front)
    try:
        await runner.submit(message("hello"))
        # A second message while the first's answer has not started (the test says when its request is at
        # the model, on stdin): folded into it.
        first = asyncio.create_task(runner.submit(message("plan my trip")))
        await asyncio.to_thread(sys.stdin.readline)
        await runner.submit(message("and a hotel"))
        await first
        assert await runner.retry(message(""), is_owner=True) is None
    finally:
        await services.aclose()
    print(json.dumps({"shown": front.shown, "telegram": "telegram" in sys.modules}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
