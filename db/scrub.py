"""An erase that leaves no readable copy of what it deleted in the database's own files.

A DELETE alone only unlinks rows: SQLite leaves their bytes in the page's free space and in freed pages, and
the WAL keeps the page images from before; FTS5 keeps a deleted row's words in its index segments until they
are merged. So an erase runs on a connection with `secure_delete=ON` (freed content and freed pages are
zeroed), then merges the keyword index (FTS5 'optimize': the old segments are freed, zeroed too), then
overwrites the pages that were free already (freed earlier by an everyday delete, see below), then
checkpoints the WAL into the file and truncates it to nothing. A reader in the middle of an older snapshot
(another process) can hold the checkpoint off: then the erase reports the files as not scrubbed yet and the
caller tries `scrub` again later. Every other connection deletes with `secure_delete=FAST` (db/engine.py):
deleted content is zeroed where that costs no extra I/O (not a freed page: hence the erase's overwrite).

PostgreSQL keeps deleted rows as dead tuples until VACUUM (autovacuum) reclaims their space, and its WAL until
the segments are recycled (and in any WAL archive): after an erase the touched tables are vacuumed at once.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, inspect, text

log = logging.getLogger(__name__)

# The FTS5 tables holding users' words (migrations 0002/0005); PostgreSQL's tsvector lives in `memories`.
FTS_TABLES = ("memories_fts",)
CHECKPOINT_TRIES = 3
FILL_TABLE = "_erase_fill"  # made and dropped in one transaction: never seen outside it
FILL_CHUNK_BYTES = 64 << 20
# The secure_delete of every connection but an erase's (db/engine.py sets it when a connection is made).
EVERYDAY_SECURE_DELETE = "FAST"


@contextmanager
def erasing(engine: Engine) -> Iterator[Connection]:
    """A connection whose deletes zero what they free (SQLite); it goes back to the pool as it came."""
    with engine.connect() as conn:
        if conn.dialect.name != "sqlite":
            yield conn
            return
        conn.exec_driver_sql("PRAGMA secure_delete=ON")
        conn.commit()
        try:
            yield conn
        finally:
            conn.rollback()
            conn.exec_driver_sql(f"PRAGMA secure_delete={EVERYDAY_SECURE_DELETE}")
            conn.commit()


def scrub(engine: Engine, tables: Iterable[str] = ()) -> bool:
    """After an erase: leave no copy of the deleted rows in the database's files; whether that is done
    (False: SQLite's WAL could not be truncated now, as another connection reads an older snapshot; try
    again later). On PostgreSQL, `tables` (those the erase deleted from) are vacuumed."""
    if engine.dialect.name == "sqlite":
        return _scrub_sqlite(engine)
    _vacuum_postgres(engine, tables)
    return True


def _scrub_sqlite(engine: Engine) -> bool:
    with erasing(engine) as conn:
        present = set(inspect(conn).get_table_names())
        for name in FTS_TABLES:
            if name in present:
                # Merges every segment into one: the deleted rows' words are dropped, the old pages freed.
                conn.exec_driver_sql(f"INSERT INTO {name}({name}) VALUES ('optimize')")  # noqa: S608  # fixed names
        conn.commit()
        _zero_free_pages(conn)
        for attempt in range(1, CHECKPOINT_TRIES + 1):
            # Waits up to the busy timeout for readers of older snapshots and writers to finish.
            busy, _log, _done = conn.exec_driver_sql("PRAGMA wal_checkpoint(TRUNCATE)").one()
            conn.commit()
            if not busy:
                return True
            log.info("erase: the WAL could not be truncated yet (try %d of %d)", attempt, CHECKPOINT_TRIES)
    return False


def _zero_free_pages(conn: Connection) -> None:
    """Overwrite every free page with zeros: those freed before (by a `secure_delete=FAST` delete, which
    leaves a freed page as it was, e.g. a long message's overflow pages when its turn took it out of the
    inbox) may still hold a deleted row. New pages come off the free list first: a table of zero blobs
    takes them all, then goes (its pages freed as zeros, on this connection). Work in proportion to the free
    space, not to the database (as a VACUUM would be)."""
    free = int(conn.exec_driver_sql("PRAGMA freelist_count").scalar_one())
    if not free:
        return
    left = free * int(conn.exec_driver_sql("PRAGMA page_size").scalar_one())
    conn.exec_driver_sql("SAVEPOINT erase_fill")  # one transaction from here to the commit, DDL included
    conn.exec_driver_sql(f"CREATE TABLE {FILL_TABLE} (b BLOB)")
    while left > 0:
        chunk = min(left, FILL_CHUNK_BYTES)
        conn.exec_driver_sql(f"INSERT INTO {FILL_TABLE} VALUES (zeroblob({chunk}))")  # noqa: S608  # fixed
        left -= chunk
    conn.exec_driver_sql(f"DROP TABLE {FILL_TABLE}")
    conn.commit()


def _vacuum_postgres(engine: Engine, tables: Iterable[str]) -> None:
    names = sorted(set(tables))
    if not names:
        return
    quote = engine.dialect.identifier_preparer.quote
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            conn.execute(text("VACUUM " + ", ".join(quote(n) for n in names)))
    except Exception as exc:  # autovacuum reclaims them later; the erase itself is done
        log.warning("erase: VACUUM of %s failed: %s", ", ".join(names), exc)
