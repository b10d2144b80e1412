"""PostgreSQL's recall parts (db/recall_postgres.py, db/recall_cache.py, migrations 0015 and 0018): the plans
that keep recall fast, and the process's copy of the bit vectors that finds what PostgreSQL finds."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, select, text, update
from sqlalchemy.orm import Session

from core_tools.memory.store import MemoryStore
from db import memories as q
from db import memory_search, recall_cache, recall_postgres
from db.engine import make_engine, make_sessionmaker
from db.migrate import downgrade, upgrade
from db.models import Memory
from tests.support.databases import postgresql_only

pytestmark = postgresql_only

PARALLEL_FREE = (
    "parallel_setup_cost",
    "parallel_tuple_cost",
    "min_parallel_index_scan_size",
    "min_parallel_table_scan_size",
)


def plan(s: Session, sql: str, params: dict[str, Any]) -> str:
    """The plan PostgreSQL picks for a statement, as JSON text."""
    return json.dumps(s.execute(text("EXPLAIN (FORMAT JSON) " + sql), params).scalar_one())


async def test_keyword_search_asks_for_the_user_as_a_words_index_key(engine: Engine) -> None:
    store = MemoryStore(make_sessionmaker(engine), engine)
    mine = await store.store(1, "long", "Running a marathon in Porto next spring")
    await store.store(2, "long", "Running shoes for the marathon")
    with make_sessionmaker(engine)() as s:
        params = {"cfg": "english", "q": "marathon", "u": 1, "k": 10, "w": recall_postgres.RANK_WEIGHTS}
        found = plan(s, str(recall_postgres._KEYWORDS), params)
        # btree_gin's (user_id, content_tsv) index takes `user_id = <bigint>` as a key, so only the user's
        # postings are read. psycopg sends a small int as smallint, which is no key of it: PostgreSQL read
        # the word's postings of every user and ANDed them with a bitmap of all the user's rows (15-40 ms
        # at 100k memories a user, bench/bench_pg.py).
        assert "(user_id = '1'::bigint)" in found and "smallint" not in found
        ids = {m.public_id: m.id for m in s.execute(select(Memory)).scalars()}
        assert memory_search.keyword_ids(s, 1, "marathon runs", 10) == [ids[mine["memory"]["id"]]]


async def test_common_words_left_out_of_keyword_query(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recall_postgres, "COMMON_TERM_DOCS", 3)
    store = MemoryStore(make_sessionmaker(engine), engine)
    for i in range(4):
        await store.store(1, "short", f"coffee note {i}", dedupe=False)
    porto = await store.store(1, "short", "coffee in Porto", dedupe=False)
    await store.store(2, "short", "Porto coffee", dedupe=False)  # another user's rows do not count
    with engine.connect() as conn:
        conn.execute(text("ANALYZE memories"))  # what autovacuum does: the counts are estimated from it
        conn.commit()
    with make_sessionmaker(engine)() as s:
        ids = {m.public_id: m.id for m in s.execute(select(Memory)).scalars()}
        assert memory_search.keyword_ids(s, 1, "coffee porto", 10) == [ids[porto["memory"]["id"]]]
        assert len(memory_search.keyword_ids(s, 1, "coffee", 10)) == 5  # a single word is kept
        assert len(memory_search.keyword_ids(s, 1, "coffee note", 10)) == 5  # every word common: all kept
        assert len(memory_search.keyword_ids(s, 2, "coffee porto", 10)) == 1


async def test_a_rare_word_outranks_a_frequent_one(engine: Engine) -> None:
    """ts_rank has no inverse document frequency: each word's rank is weighted by one estimated from the
    statistics, so a name found once beats a word most memories have, said three times (as BM25 ranks)."""
    store = MemoryStore(make_sessionmaker(engine), engine)
    for i in range(30):
        await store.store(1, "short", f"coffee with the team, day {i}", dedupe=False)
    loud = await store.store(1, "short", "coffee, coffee and more coffee", dedupe=False)
    rare = await store.store(1, "short", "Met Zebulon at the market", dedupe=False)
    with make_sessionmaker(engine)() as s:
        ids = {m.public_id: m.id for m in s.execute(select(Memory)).scalars()}
        before = memory_search.keyword_ids(s, 1, "coffee Zebulon", 2)
    # Without statistics every word weighs the same: the thrice-said word wins.
    assert before[0] == ids[loud["memory"]["id"]]
    with engine.connect() as conn:
        conn.execute(text("ANALYZE memories"))  # what autovacuum does
        conn.commit()
    with make_sessionmaker(engine)() as s:
        assert memory_search.keyword_ids(s, 1, "coffee Zebulon", 2)[0] == ids[rare["memory"]["id"]]


async def test_common_words_are_kept_without_statistics(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recall_postgres, "COMMON_TERM_DOCS", 3)
    store = MemoryStore(make_sessionmaker(engine), engine)
    for i in range(4):
        await store.store(1, "short", f"coffee note {i}", dedupe=False)
    await store.store(1, "short", "coffee in Porto", dedupe=False)
    with make_sessionmaker(engine)() as s:  # never analyzed: no estimate, every word searched
        assert len(memory_search.keyword_ids(s, 1, "coffee porto", 10)) == 5


def test_recall_scans_run_without_parallel_workers(engine: Engine) -> None:
    url = engine.url.render_as_string(hide_password=False)
    nearest = str(recall_postgres._NEAREST[False])
    params = {"u": 1, "q": recall_postgres.vector_literal([0.1] * 384), "k": 64}

    with engine.connect() as conn:  # two users' memories with vectors (the trigger of 0004 sets the bits)
        conn.execute(
            text(
                "INSERT INTO memories (public_id, user_id, layer, category, content, created_at, updated_at,"
                " embedder, embedding) SELECT 'bulk' || g.i, 1 + g.i % 2, 'long', 'fact', 'note ' || g.i,"
                " now(), now(), 'e', (SELECT CAST(CAST(array_agg(random() - 0.5 + x * 0 + g.i * 0) AS real[])"
                " AS vector) FROM generate_series(1, 384) AS x) FROM generate_series(1, 5000) AS g(i)"
            )
        )
        conn.commit()
        conn.execute(text("ANALYZE memories"))
        conn.commit()

    def bits_plan() -> str:
        with make_sessionmaker(engine)() as s, s.begin():
            # Parallel plans made free: PostgreSQL takes one wherever the table allows it.
            for setting in PARALLEL_FREE:
                s.execute(text(f"SET LOCAL {setting} = 0"))
            return plan(s, nearest, params)

    assert "Gather" not in bits_plan()
    engine.dispose()
    downgrade(url, "0014")
    assert "Gather" in bits_plan()  # before 0015 the user's bit vectors were read by parallel workers
    engine.dispose()
    upgrade(url)
    other = make_engine(url)
    with other.connect() as conn:
        reloptions = text("SELECT reloptions FROM pg_class WHERE oid = 'memories'::regclass")
        options = conn.execute(reloptions).scalar()
        assert options == ["parallel_workers=0"]
    other.dispose()


# The process's copy of a user's bit vectors (db/recall_cache.py, migration 0018): the same candidates as
# PostgreSQL's own search, kept up to date with every writer's changes.

DIM = 384
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def unit_vectors(n: int, seed: int) -> list[list[float]]:
    """n random unit vectors, the same for a seed."""
    rng = np.random.default_rng(seed)
    vecs = rng.standard_normal((n, DIM)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return [[float(x) for x in v] for v in vecs]


def add_memories(
    engine: Engine, user_id: int, vectors: list[list[float]], layers: tuple[str, ...]
) -> list[int]:
    """Memories with these vectors, written as the app writes them (db.memories); returns their ids."""
    ids = []
    with make_sessionmaker(engine)() as s, s.begin():
        for i, v in enumerate(vectors):
            mem = q.insert_memory(
                s,
                q.NewMemory(
                    user_id=user_id,
                    layer=layers[i % len(layers)],
                    category="fact",
                    content=f"note {user_id} {i}",
                    now=T0,
                    vector=v,
                    embedder_id="e",
                ),
            )
            ids.append(mem.id)
    return ids


def searched_in_postgres(
    s: Session, user_id: int, vector: list[float], k: int, layer: str | None
) -> list[int]:
    """The candidates of PostgreSQL's own bit search (no copy)."""
    params: dict[str, Any] = {"u": user_id, "q": recall_postgres.vector_literal(vector), "k": k}
    if layer is not None:
        params["l"] = layer
    return [int(r[0]) for r in s.execute(recall_postgres._NEAREST[layer is not None], params)]


def from_copy(s: Session, user_id: int, vector: list[float], k: int, layer: str | None = None) -> list[int]:
    """The candidates from the process's copy; fails when the copy was not used."""
    found = recall_cache.vector_candidates(s, user_id, vector, k, layer)
    assert found is not None, "the search went to PostgreSQL, not to the copy"
    return found


def assert_same_as_postgres(engine: Engine, user_id: int, queries: list[list[float]], k: int = 64) -> None:
    """The copy's candidates equal PostgreSQL's (order included: nearest first, ties by id)."""
    with make_sessionmaker(engine)() as s:
        for v in queries:
            for layer in (None, "long", "mid"):
                assert from_copy(s, user_id, v, k, layer) == searched_in_postgres(s, user_id, v, k, layer)


@pytest.fixture
def copies() -> Iterator[recall_cache.RecallCache]:
    """The process's cache, emptied before and after the test."""
    recall_cache.configure(recall_cache.DEFAULT_MAX_MB)
    yield recall_cache.cache()
    recall_cache.configure(recall_cache.DEFAULT_MAX_MB)


def test_recall_from_the_copy_finds_what_postgresql_finds(
    engine: Engine, copies: recall_cache.RecallCache
) -> None:
    add_memories(engine, 1, unit_vectors(300, seed=1), ("long", "mid", "short"))
    add_memories(engine, 2, unit_vectors(60, seed=2), ("long",))
    queries = unit_vectors(15, seed=3)
    # Random 384-bit vectors: many rows lie at the k-th distance, so ties are decided (by id) every time.
    assert_same_as_postgres(engine, 1, queries)
    assert_same_as_postgres(engine, 1, queries, k=5)
    assert_same_as_postgres(engine, 2, queries)
    with make_sessionmaker(engine)() as s:
        assert from_copy(s, 1, queries[0], 10, "session") == []  # a layer the user has no memory in
        assert from_copy(s, 3, queries[0], 10) == []  # a user without memories
        with_copy = [
            memory_search.hybrid_search(
                s, 1, T0, query_text="note", vector=v, embedder_id="e", layers=["long", "mid"]
            )
            for v in queries
        ]
        recall_cache.configure(0)  # no copies: every search in PostgreSQL
        assert recall_cache.vector_candidates(s, 1, queries[0], 10, None) is None
        without = [
            memory_search.hybrid_search(
                s, 1, T0, query_text="note", vector=v, embedder_id="e", layers=["long", "mid"]
            )
            for v in queries
        ]
    assert with_copy == without and all(with_copy)


def test_a_write_by_another_replica_is_seen_by_the_next_recall(
    engine: Engine, copies: recall_cache.RecallCache
) -> None:
    url = engine.url.render_as_string(hide_password=False)
    replica = make_engine(url)  # another process's engine: its writes never pass through this one
    add_memories(replica, 1, unit_vectors(150, seed=4), ("long", "mid"))
    queries = unit_vectors(5, seed=5)
    target = queries[0]

    def first_found() -> int:
        with make_sessionmaker(engine)() as s:
            return memory_search.vector_ids(s, 1, target, 1)[0][0]

    before = first_found()  # the copy is made here
    [new] = add_memories(replica, 1, [target], ("long",))
    assert first_found() == new
    assert_same_as_postgres(engine, 1, queries)
    with make_sessionmaker(replica)() as s, s.begin():
        q.forget(s, 1, s.get_one(Memory, new).public_id)
    assert first_found() == before
    with make_sessionmaker(replica)() as s, s.begin():  # another memory rewritten with the query's vector
        mem = s.get_one(Memory, before + 1 if before + 1 != new else before + 2)
        q.update_memory(
            s,
            mem,
            content="moved",
            category="fact",
            now=T0,
            certainty=None,
            expires_at=None,
            vector=target,
            embedder_id="e",
        )
        moved = mem.id
    assert first_found() == moved
    assert_same_as_postgres(engine, 1, queries)
    with (
        make_sessionmaker(replica)() as s,
        s.begin(),
    ):  # another layer: the searches of its old one must lose it
        s.execute(update(Memory).where(Memory.id == moved).values(layer="short"))
    assert_same_as_postgres(engine, 1, queries)
    with make_sessionmaker(replica)() as s, s.begin():
        s.execute(update(Memory).where(Memory.user_id == 1, Memory.id % 3 == 0).values(expires_at=T0))
        assert q.delete_expired(s, T0 + timedelta(seconds=1)) > 0
    assert_same_as_postgres(engine, 1, queries)
    with replica.begin() as conn:  # more rows in one statement than the log takes: the copy is read whole
        conn.execute(
            text(
                "INSERT INTO memories (public_id, user_id, layer, category, content, created_at, updated_at,"
                " embedder, embedding) SELECT 'bulk' || g.i, 1, 'long', 'fact', 'bulk ' || g.i, now(), now(),"
                " 'e', (SELECT CAST(CAST(array_agg(random() - 0.5 + x * 0 + g.i * 0) AS real[]) AS vector)"
                " FROM generate_series(1, 384) AS x) FROM generate_series(1, 1200) AS g(i)"
            )
        )
    assert_same_as_postgres(engine, 1, queries)
    with make_sessionmaker(replica)() as s, s.begin():  # a new center: every bit changes
        s.execute(text("UPDATE memories_vec_center SET sample = 0"))
        recall_postgres.BACKEND.recenter(s)
    assert_same_as_postgres(engine, 1, queries)
    replica.dispose()


def test_an_uncommitted_write_never_reaches_the_copy(
    engine: Engine, copies: recall_cache.RecallCache
) -> None:
    add_memories(engine, 1, unit_vectors(120, seed=6), ("long",))
    target, other = unit_vectors(2, seed=7)
    assert_same_as_postgres(engine, 1, [target])
    with make_sessionmaker(engine)() as s:  # a transaction that stores, searches, and rolls back
        mem = q.insert_memory(
            s,
            q.NewMemory(
                user_id=1,
                layer="long",
                category="fact",
                content="never kept",
                now=T0,
                vector=target,
                embedder_id="e",
            ),
        )
        assert memory_search.vector_ids(s, 1, target, 1)[0][0] == mem.id  # it sees its own row
        s.rollback()
    # Another write takes the version number the rolled-back one had: the copy must not hold that row.
    [kept] = add_memories(engine, 1, [other], ("long",))
    with make_sessionmaker(engine)() as s:
        assert mem.id not in from_copy(s, 1, target, 64)
        assert memory_search.vector_ids(s, 1, other, 1)[0][0] == kept
    assert_same_as_postgres(engine, 1, [target, other])


def test_copies_stay_within_their_bound(engine: Engine, copies: recall_cache.RecallCache) -> None:
    for user in (1, 2, 3):
        add_memories(engine, user, unit_vectors(100, seed=10 + user), ("long",))
    add_memories(engine, 4, unit_vectors(400, seed=14), ("long",))
    queries = unit_vectors(3, seed=15)
    one_user = 100 * (8 + 1 + 48)  # an id, a layer code and 384 bits a memory
    recall_cache.configure(2.5 * one_user / (1 << 20))  # room for two users' copies, not for user 4's
    for user in (1, 2, 3, 1, 3):
        assert_same_as_postgres(engine, user, queries)
        assert copies.nbytes <= copies.max_bytes
    assert copies.nbytes == 2 * one_user
    with make_sessionmaker(engine)() as s:  # too big to keep: found all the same, then searched in PostgreSQL
        for _ in range(2):
            assert recall_postgres.BACKEND.vector_candidates(s, 4, queries[0], 16) == searched_in_postgres(
                s, 4, queries[0], 64, None
            )
        assert recall_cache.vector_candidates(s, 4, queries[0], 64, None) is None
    assert copies.nbytes == 2 * one_user


def test_recalls_in_many_threads_find_what_postgresql_finds(
    engine: Engine, copies: recall_cache.RecallCache
) -> None:
    for user in (1, 2):
        add_memories(engine, user, unit_vectors(200, seed=20 + user), ("long", "short"))
    queries = unit_vectors(10, seed=23)
    with make_sessionmaker(engine)() as s:
        want = {
            (u, i): searched_in_postgres(s, u, v, 64, None) for u in (1, 2) for i, v in enumerate(queries)
        }
    copies.clear()

    def recall(user: int) -> dict[tuple[int, int], list[int]]:
        with make_sessionmaker(engine)() as s:
            return {(user, i): from_copy(s, user, v, 64) for i, v in enumerate(queries)}

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(recall, [1, 2, 1, 2, 1, 2, 1, 2]))
    for got in results:
        assert got == {key: want[key] for key in got}
