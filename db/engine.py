"""The one engine factory: used by the app, the tests and Alembic."""

from __future__ import annotations

import importlib
import logging
import sqlite3
from pathlib import Path
from types import ModuleType
from typing import Any

import sqlite_vec
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 5000
# Reads through a memory map instead of a read() per page: the vector search reads every bit vector of a
# user (100k memories: 4.8 MB a query), 7.5 -> 5.9 ms at 100k (bench/bench_memory.py). An upper bound on
# the mapping, not memory taken; the stdlib sqlite3 caps it at 2 GB.
MMAP_SIZE = 1 << 32
# PostgreSQL ends a session left idle inside a transaction this long (and so lets go of its row locks): a
# process frozen mid-transaction (stopped, paused, starved) would otherwise hold a chat's or a job's lease
# row, and every other replica's claim of it would wait for as long. No transaction of the bot waits between
# its statements (a backup's snapshot reads in batches): a minute is far more than any of them needs.
IDLE_IN_TRANSACTION_S = 60.0


def sqlite_module() -> ModuleType:
    """Return a DB-API sqlite module that can load extensions (the stdlib one when it can)."""
    if hasattr(sqlite3.Connection, "enable_load_extension"):
        return sqlite3
    # pyenv's and macOS's Pythons are built without extension loading (docs/design-notes.md, SQLite
    # extensions).
    return importlib.import_module("sqlean")


def _on_connect(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.enable_load_extension(True)
    sqlite_vec.load(dbapi_conn)
    dbapi_conn.enable_load_extension(False)
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute(f"PRAGMA mmap_size={MMAP_SIZE}")
    # Deleted content is zeroed where that costs no extra I/O (an erase zeroes all of it: db/scrub.py).
    cur.execute("PRAGMA secure_delete=FAST")
    cur.close()


def make_engine(url: str, *, idle_in_transaction_s: float = IDLE_IN_TRANSACTION_S) -> Engine:
    """Build an engine; for SQLite, every connection gets sqlite-vec, WAL, foreign keys and a busy timeout;
    PostgreSQL goes through psycopg 3, its sessions ended when idle in a transaction for
    `idle_in_transaction_s` (the pool replaces such a connection when it is next taken)."""
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        # A plain postgresql:// URL (what most tools print) means psycopg 3 here, the driver installed.
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() != "sqlite":
        timeout = f"-c idle_in_transaction_session_timeout={max(1, round(idle_in_transaction_s * 1000))}"
        given = parsed.query.get("options")  # the URL's own ?options= (a search_path...) are kept
        given_text = " ".join(given) if isinstance(given, tuple) else given
        options = f"{given_text} {timeout}" if given_text else timeout
        return create_engine(parsed, pool_pre_ping=True, connect_args={"options": options})
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, module=sqlite_module(), connect_args={"check_same_thread": False})
    event.listen(engine, "connect", _on_connect)
    return engine


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    """Return the session factory every query module uses."""
    return sessionmaker(engine, expire_on_commit=False)


def engine_for(sessions: sessionmaker[Session], engine: Engine) -> Engine:
    """The engine a repository runs its Core statements on, checked against its sessionmaker's: one bound to
    another engine is refused (its ORM and Core statements would run on different databases)."""
    bound = sessions.kw.get("bind")
    if bound is not None and bound is not engine:
        raise ValueError("the sessionmaker is bound to another engine than the one given")
    return engine
