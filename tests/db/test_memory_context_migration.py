"""Migration 0027 (what a memory carries) on both databases: rows made before keep their words, new rows'
context words are found and weigh less than a memory's own words, and the way back works."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import inspect, text

from core_tools.memory.store import MemoryStore
from db.engine import make_engine, make_sessionmaker
from db.memory_words import fts_text
from db.migrate import downgrade, upgrade
from tests.support.databases import both_databases

db_kind = both_databases()

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


async def test_old_rows_keep_their_words_and_context_words_weigh_less(
    database_url: str, db_kind: str
) -> None:
    downgrade(database_url, "0026")
    engine = make_engine(database_url)
    with engine.begin() as conn:  # a row as the code of 0026 wrote it
        conn.execute(
            text(
                "INSERT INTO memories(public_id, user_id, layer, category, content, created_at, updated_at,"
                " origin, untrusted) VALUES ('p1', 1, 'long', 'fact', 'Ferry to Hydra booked', :t, :t,"
                " 'model', false)"
            ),
            {"t": NOW.replace(tzinfo=None)},
        )
        if db_kind == "sqlite":
            conn.execute(
                text("INSERT INTO memories_fts(rowid, content) SELECT id, :c FROM memories"),
                {"c": fts_text(1, "Ferry to Hydra booked")},
            )
    engine.dispose()
    upgrade(database_url)
    engine = make_engine(database_url)
    store = MemoryStore(make_sessionmaker(engine), engine, None)  # keywords only
    store.now = lambda: NOW
    assert [m["id"] for m in await store.recall(1, "hydra ferry")] == ["p1"]
    # "ferry" in one memory's own words and in another's context: its own words rank first.
    said = await store.store(1, "long", "Yes, the early one", context="Anna: which ferry do we take?")
    own = await store.store(1, "long", "The ferry leaves at seven")
    found = [m["id"] for m in await store.recall(1, "ferry", limit=3)]
    assert found.index(own["memory"]["id"]) < found.index(said["memory"]["id"])
    assert said["memory"]["id"] in found and "p1" in found
    await store.forget(1, said["memory"]["id"])
    assert said["memory"]["id"] not in [m["id"] for m in await store.recall(1, "anna ferry", limit=5)]
    engine.dispose()
    downgrade(database_url, "0026")
    engine = make_engine(database_url)
    with engine.connect() as conn:
        assert "context" not in {c["name"] for c in inspect(conn).get_columns("memories")}
    engine.dispose()
    upgrade(database_url)
