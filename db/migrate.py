"""Runs Alembic migrations from code: the bot upgrades its database to head at start.

A database already at head is told apart without Alembic: its `alembic_version` row against the newest
revision named in migrations/versions (`script_head`, read from the files' `revision = ...` lines). Importing
Alembic and loading its environment cost a start-up some 0.15-0.3 s of CPU for nothing then; every other
case (an empty database, one behind, a chain the reading cannot follow) goes to Alembic as before.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, inspect, text

from db.engine import make_engine

if TYPE_CHECKING:  # Alembic is imported only where a migration runs (or its config is asked for)
    from alembic.config import Config

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
VERSIONS_DIR = MIGRATIONS_DIR / "versions"
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
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.attributes["database_url"] = url
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    """Upgrade the database to `revision`; on PostgreSQL one process at a time (an advisory lock). A
    database already at head is left alone without loading Alembic (`at_head`)."""
    engine = make_engine(url)
    if revision == "head" and at_head(engine):
        engine.dispose()
        log.debug("the database is at head: nothing to migrate")
        return
    from alembic import command

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
    from alembic import command

    command.downgrade(alembic_config(url), revision)


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at, or None when it is empty."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


def head_revision() -> str | None:
    """The newest revision in migrations/."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("")).get_current_head()


# A revision file's own lines, as `alembic revision` writes them (with or without a type annotation).
_LINE = r"^{name}(?:\s*:[^=\n]+)?\s*=\s*(?P<value>[^\n]*?)\s*(?:#.*)?$"
_REVISION = re.compile(_LINE.format(name="revision"), re.MULTILINE)
_DOWN_REVISION = re.compile(_LINE.format(name="down_revision"), re.MULTILINE)
_OTHER_LINKS = re.compile(_LINE.format(name="(?:branch_labels|depends_on)"), re.MULTILINE)
_QUOTED = re.compile(r"""^(?:"([^"\\]+)"|'([^'\\]+)')$""")


def _quoted(value: str) -> str | None:
    found = _QUOTED.match(value)
    return (found.group(1) or found.group(2)) if found else None


def script_head(versions: Path = VERSIONS_DIR) -> str | None:
    """The newest revision of `versions` when its files form one plain chain (each names one revision and
    one parent, the first None; no branch labels, dependencies or merges), read without Alembic; None for
    anything else, which the caller leaves to Alembic."""
    parents: dict[str, str | None] = {}
    for path in sorted(versions.glob("*.py")):
        source = path.read_text(encoding="utf-8")
        revision = [_quoted(v) for v in _REVISION.findall(source)]
        down = _DOWN_REVISION.findall(source)
        if len(revision) != 1 or revision[0] is None or len(down) != 1 or revision[0] in parents:
            return None
        if any(v != "None" for v in _OTHER_LINKS.findall(source)):
            return None
        parent = None if down[0] == "None" else _quoted(down[0])
        if parent is None and down[0] != "None":
            return None  # a merge (a tuple of parents) or a value this reading does not know
        parents[revision[0]] = parent
    children = set(parents.values())
    heads = [r for r in parents if r not in children]
    roots = [r for r, p in parents.items() if p is None]
    linked = all(p is None or p in parents for p in parents.values())
    if len(heads) != 1 or len(roots) != 1 or not linked or len(children - {None}) != len(parents) - 1:
        return None
    return heads[0]


def at_head(engine: Engine) -> bool:
    """True when the database's `alembic_version` holds exactly the head of migrations/versions; False for
    an empty database, one behind (or ahead), and whenever `script_head` cannot tell."""
    head = script_head()
    if head is None:
        return False
    with engine.connect() as conn:
        if not inspect(conn).has_table("alembic_version"):
            return False
        stored = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
    return stored == [head]


def url_from_environment() -> str:
    """DATABASE_URL for the alembic command line (the bot passes its settings instead)."""
    return os.environ.get("DATABASE_URL", DEFAULT_DATABASE_URL)
