"""PostgreSQL's recall parts (db/recall_postgres.py, migration 0015): the plans that keep recall fast."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from core_tools.memory.store import MemoryStore
from db import memory_search, recall_postgres
from db.engine import make_engine, make_sessionmaker
from db.migrate import downgrade, upgrade
from db.models import Memory

pytestmark = pytest.mark.postgresql_only

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
    store = MemoryStore(make_sessionmaker(engine))
    mine = await store.store(1, "long", "Running a marathon in Porto next spring")
    await store.store(2, "long", "Running shoes for the marathon")
    with make_sessionmaker(engine)() as s:
        params = {"cfg": "english", "q": "marathon", "u": 1, "k": 10}
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
    store = MemoryStore(make_sessionmaker(engine))
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


async def test_common_words_are_kept_without_statistics(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(recall_postgres, "COMMON_TERM_DOCS", 3)
    store = MemoryStore(make_sessionmaker(engine))
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
