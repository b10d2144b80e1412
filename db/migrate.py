"""Runs Alembic migrations from code: the bot upgrades its database to head at start."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text

from db.engine import make_engine

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
DEFAULT_DATABASE_URL = "sqlite:///data/assistant.db"
# The session-level advisory lock that serialises upgrades on PostgreSQL: replicas starting together migrate
# one after the other (the later ones find the schema at head). Any fixed bigint; this one spells "alembic".
MIGRATION_LOCK_KEY = 0x616C656D626963

# Tables that sqlite-vec and FTS5 create behind a virtual table; Alembic must neither create nor drop them.
SHADOW_SUFFIXES = (
    "_chunks",
    "_rowids",
    "_vector_chunks00",
    "_info",
    "_auxiliary",
    "_data",
    "_idx",
    "_content",
    "_docsize",
    "_config",
    "_metadatachunks00",
    "_metadatatext00",
)


def is_managed_table(name: str | None, virtual_tables: set[str]) -> bool:
    """False for virtual tables and their shadow tables, which migrations create by raw SQL."""
    if name is None:
        return True
    if name in virtual_tables:
        return False
    return not any(name == v + s or name.startswith(v + "_") for v in virtual_tables for s in SHADOW_SUFFIXES)


def alembic_config(url: str) -> Config:
    """An Alembic config pointing at our migrations and the given database."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["database_url"] = url
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Upgrade the database to `revision`; on PostgreSQL one process at a time (an advisory lock)."""
    engine = make_engine(url)
    if engine.dialect.name != "postgresql":
        # SQLite: one file, one bot process; its own write lock already serialises writers.
        engine.dispose()
        command.upgrade(alembic_config(url), revision)
        return
    try:
        # A dedicated connection outside Alembic's transaction: the lock is the session's, held until unlock
        # or until this process dies (PostgreSQL then frees it, so a crashed replica blocks nobody).
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as lock:
            key = {"key": MIGRATION_LOCK_KEY}
            if not lock.execute(text("SELECT pg_try_advisory_lock(:key)"), key).scalar():
                log.info("another process is migrating the database: waiting for it to finish")
                lock.execute(text("SELECT pg_advisory_lock(:key)"), key)
            try:
                command.upgrade(alembic_config(url), revision)
            finally:
                lock.execute(text("SELECT pg_advisory_unlock(:key)"), key)
    finally:
        engine.dispose()


def downgrade(url: str, revision: str = "base") -> None:
    """Downgrade the database to `revision`."""
    command.downgrade(alembic_config(url), revision)


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None when it is empty."""
    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str | None:
    """The newest revision in migrations/."""
    return ScriptDirectory.from_config(alembic_config("")).get_current_head()


def url_from_environment() -> str:
    """DATABASE_URL for the alembic command line (the bot passes its settings instead)."""
    return os.environ.get("DATABASE_URL", DEFAULT_DATABASE_URL)
