"""The turn's short transactions on the connection a thread keeps (db/connections.py), on a SQLite file."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from db import connections
from db.engine import make_engine

pytestmark = pytest.mark.usefixtures("table")


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> Any:
    engine = make_engine(f"sqlite:///{tmp_path / 'kept.sqlite'}")
    yield engine
    engine.dispose()


@pytest.fixture
def table(sqlite_engine: Engine) -> None:
    with sqlite_engine.begin() as conn:
        conn.execute(text("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL)"))


def _bodies(engine: Engine) -> list[str]:
    with engine.connect() as conn:  # a connection of the pool's: sees only what was committed
        return [r[0] for r in conn.execute(text("SELECT body FROM notes ORDER BY id"))]


def _driver(conn: Any) -> Any:
    return conn.connection.dbapi_connection


def test_each_block_is_a_transaction_of_its_own_on_the_threads_kept_connection(sqlite_engine: Engine) -> None:
    with connections.begin(sqlite_engine) as conn:
        conn.execute(text("INSERT INTO notes (body) VALUES ('kept')"))
        first = _driver(conn)
    assert _bodies(sqlite_engine) == ["kept"]  # committed when the block ended
    with pytest.raises(RuntimeError), connections.begin(sqlite_engine) as conn:
        conn.execute(text("INSERT INTO notes (body) VALUES ('lost')"))
        raise RuntimeError("the turn failed")
    assert _bodies(sqlite_engine) == ["kept"]  # rolled back
    with connections.read(sqlite_engine) as conn:
        assert _driver(conn) is first
        assert [r[0] for r in conn.execute(text("SELECT body FROM notes"))] == ["kept"]


def test_a_read_holds_no_snapshot_after_it_ends(sqlite_engine: Engine) -> None:
    with connections.read(sqlite_engine) as conn:
        conn.execute(text("SELECT count(*) FROM notes")).all()
    with sqlite_engine.begin() as other:  # another connection writes, then checkpoints the whole WAL
        other.execute(text("INSERT INTO notes (body) VALUES ('later')"))
    with sqlite_engine.connect() as other:
        busy, _log, _done = other.execute(text("PRAGMA wal_checkpoint(TRUNCATE)")).one()
    assert busy == 0  # no reader pinned an older snapshot
    with connections.read(sqlite_engine) as conn:
        assert conn.execute(text("SELECT body FROM notes")).scalar() == "later"


def test_a_block_inside_a_block_and_another_thread_get_connections_of_their_own(
    sqlite_engine: Engine,
) -> None:
    with connections.read(sqlite_engine) as outer:
        with connections.begin(sqlite_engine) as inner:
            assert _driver(inner) is not _driver(outer)
            inner.execute(text("INSERT INTO notes (body) VALUES ('inner')"))
        assert outer.execute(text("SELECT body FROM notes")).scalar() == "inner"
    theirs: list[Any] = []

    def elsewhere() -> None:
        with connections.read(sqlite_engine) as conn:
            theirs.append(_driver(conn))

    worker = threading.Thread(target=elsewhere)
    worker.start()
    worker.join()
    with connections.read(sqlite_engine) as mine:
        assert theirs and theirs[0] is not _driver(mine)


def test_disposing_the_engine_closes_what_its_threads_kept(sqlite_engine: Engine) -> None:
    with connections.read(sqlite_engine) as conn:
        kept = _driver(conn)
    sqlite_engine.dispose()
    with pytest.raises(sqlite3.ProgrammingError if isinstance(kept, sqlite3.Connection) else Exception):
        kept.execute("SELECT 1")
    with connections.begin(sqlite_engine) as conn:  # the engine goes on with a new one
        conn.execute(text("INSERT INTO notes (body) VALUES ('after')"))
        assert _driver(conn) is not kept
    assert _bodies(sqlite_engine) == ["after"]
