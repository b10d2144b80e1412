"""One upgrade at a time on a database: replicas starting together on a database behind head, or the
operator's `python -m bot upgrade` beside a starting bot. The later ones wait, then find it at head."""

from __future__ import annotations

import fcntl
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url

from db.engine import make_engine

log = logging.getLogger(__name__)
# A session-level advisory lock of its own: db.migrate's (0x616C656D626963) is taken by the migrations run
# inside an upgrade, on other connections of this same process. This one spells "upgrade".
UPGRADE_LOCK_KEY = 0x75706772616465


@contextmanager
def upgrade_lock(database_url: str) -> Iterator[None]:
    """Hold the database's upgrade lock (SQLite: a lock file beside it; PostgreSQL: an advisory lock)."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        path = Path(f"{url.database}.upgrade-lock")
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                log.info("another process is upgrading the database: waiting for it to finish")
                fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        return
    engine = make_engine(database_url)
    try:
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            key = {"key": UPGRADE_LOCK_KEY}
            if not conn.execute(text("SELECT pg_try_advisory_lock(:key)"), key).scalar():
                log.info("another process is upgrading the database: waiting for it to finish")
                conn.execute(text("SELECT pg_advisory_lock(:key)"), key)
            try:
                yield
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:key)"), key)
    finally:
        engine.dispose()
