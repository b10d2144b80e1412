"""Whole-database snapshots for backups: one consistent copy as a SQLite file, whatever the database.

SQLite is copied with its online backup API (one step: a consistent snapshot that does not block writers in
WAL mode). PostgreSQL is copied table by table into a SQLite file of the same schema revision, all in one
REPEATABLE READ, READ ONLY transaction (one snapshot of every table, the bot writing meanwhile): the
backup's own logical dump, which restores into either database and can be checked without a server (see
the README, "Backups and your data"). A snapshot is loaded back into PostgreSQL the same way, in one
transaction, so a failed load leaves the target as it was.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from sqlalchemy import Connection, Engine, Table, delete, func, inspect, select, text

from db.engine import make_engine, sqlite_module
from db.migrate import current_revision, head_revision, is_managed_table, upgrade
from db.models import Base, Replica, utcnow
from db.transfer import RUNTIME_TABLES, CopyReport, copy_tables, match_vector_dim

Say = Callable[[str], None]


class SnapshotError(Exception):
    """A snapshot could not be taken or loaded; the message says why in one line."""


def data_tables() -> list[Table]:
    """The tables a backup holds, parents first: every table the models declare but the runtime ones."""
    return [t for t in Base.metadata.sorted_tables if t.name not in RUNTIME_TABLES]


def present_tables(conn: Connection) -> list[Table]:
    """The data tables this database has (an older schema may lack some), parents first."""
    names = set(inspect(conn).get_table_names())
    return [t for t in data_tables() if t.name in names]


def table_counts(conn: Connection) -> dict[str, int]:
    """Rows per data table of this database."""
    return {
        t.name: int(conn.execute(select(func.count()).select_from(t)).scalar_one())
        for t in present_tables(conn)
    }


def revision_of(conn: Connection) -> str | None:
    """The Alembic revision the database is at (None when it has none)."""
    names = set(inspect(conn).get_table_names())
    if "alembic_version" not in names:
        return None
    return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()


def sqlite_url(path: Path) -> str:
    """The SQLAlchemy URL of a SQLite file."""
    return f"sqlite:///{path}"


def copy_sqlite_file(source: Path, target: Path) -> None:
    """Copy a live SQLite database into a new file with the online backup API."""
    module = sqlite_module()
    src: sqlite3.Connection = module.connect(str(source))
    dst: sqlite3.Connection = module.connect(str(target))
    try:
        with dst:
            # One step: a stepped backup restarts whenever another connection writes, and under steady
            # writes never ends. In WAL mode one step reads a consistent snapshot without blocking writers.
            src.backup(dst)
        dst.execute("PRAGMA journal_mode=DELETE")  # one self-contained file, no -wal beside it
    finally:
        dst.close()
        src.close()


def snapshot(database_url: str, target: Path, say: Say = lambda _: None) -> None:
    """Write one consistent copy of the database to the new SQLite file `target`."""
    engine = make_engine(database_url)
    try:
        if engine.dialect.name == "sqlite":
            source = engine.url.database
            if not source or source == ":memory:" or not Path(source).exists():
                raise SnapshotError(f"there is no database at {source}")
            copy_sqlite_file(Path(source), target)
        else:
            _postgres_snapshot(engine, target, say)
        _clear_runtime(target)
    finally:
        engine.dispose()


def _postgres_snapshot(source: Engine, target: Path, say: Say) -> None:
    revision = current_revision(source)
    if revision is not None and revision not in known_revisions():
        raise SnapshotError(
            f"the database is at schema revision {revision}, which this code does not know (newest "
            f"{head_revision()}): back it up with the version of the bot that made it"
        )
    # A database behind head (before an upgrade: bot/process/upgrade/) is copied at its own revision: the
    # snapshot's schema is made by the same migrations, and only the columns both have are copied.
    url = sqlite_url(target)
    upgrade(url, revision or "head")
    dest = make_engine(url)
    try:
        with (
            source.connect().execution_options(isolation_level="REPEATABLE READ") as src,
            dest.connect() as dst,
        ):
            src.execute(text("SET TRANSACTION READ ONLY"))  # the first statement: one snapshot for all
            match_vector_dim(src, dst, say)
            copy_tables(src, dst, CopyReport(), say=say, commit=False)
            dst.commit()
            src.rollback()
    finally:
        dest.dispose()


def known_revisions() -> set[str]:
    """Every revision of this code's migrations."""
    from alembic.script import ScriptDirectory

    from db.migrate import alembic_config

    return {rev.revision for rev in ScriptDirectory.from_config(alembic_config("")).walk_revisions()}


def _clear_runtime(path: Path) -> None:
    # Which processes ran and what they held: nothing in them is alive in a restored copy.
    engine = make_engine(sqlite_url(path))
    try:
        with engine.begin() as conn:
            names = set(inspect(conn).get_table_names())
            for name in sorted(RUNTIME_TABLES & names):
                conn.execute(text(f"DELETE FROM {name}"))  # noqa: S608  # fixed table names
    finally:
        engine.dispose()


def is_empty(conn: Connection) -> bool:
    """Whether the database holds no data (no table, or every data table empty)."""
    return not any(conn.execute(select(t).limit(1)).first() for t in present_tables(conn))


def live_processes(conn: Connection, lease_s: float) -> int:
    """How many bot processes wrote their heartbeat within `lease_s` (0 without a replicas table)."""
    if "replicas" not in set(inspect(conn).get_table_names()):
        return 0
    if conn.dialect.name == "postgresql":  # heartbeats are written by the server's clock there
        query = text(
            "SELECT count(*) FROM replicas "
            "WHERE heartbeat_at > timezone('UTC', now()) - make_interval(secs => :s)"
        )
        return int(conn.execute(query, {"s": lease_s}).scalar_one())
    cutoff = utcnow() - timedelta(seconds=lease_s)
    return int(conn.execute(select(func.count()).where(Replica.heartbeat_at > cutoff)).scalar_one())


def load_snapshot(
    snapshot_path: Path,
    target: Engine,
    *,
    replace: bool,
    say: Say = lambda _: None,
    revision: str | None = None,
) -> CopyReport:
    """Copy a snapshot (at head, or at `revision`) into the database `target`, migrated to head (or to
    `revision`) first, in one transaction; `replace` deletes what the target holds first (in the same
    transaction)."""
    upgrade(target.url.render_as_string(hide_password=False), revision or "head")
    source = make_engine(sqlite_url(snapshot_path))
    report = CopyReport()
    try:
        with source.connect() as src, target.connect() as dst:
            if replace:
                for table in reversed(present_tables(dst)):
                    dst.execute(delete(table))
            elif not is_empty(dst):
                raise SnapshotError("the target database is not empty")
            match_vector_dim(src, dst, say)
            copy_tables(src, dst, report, say=say, commit=False)
            if not report.ok:
                dst.rollback()
                bad = ", ".join(t.name for t in report.tables if not t.ok)
                raise SnapshotError(f"the copy's row counts differ in {bad}; nothing was changed")
            dst.commit()
    finally:
        source.dispose()
    return report


def managed_tables(conn: Connection) -> list[str]:
    """Every table of the database that is not a virtual table's shadow (the raw-SQL tables included)."""
    names = inspect(conn).get_table_names()
    virtual: set[str] = set()
    if conn.dialect.name == "sqlite":
        rows = conn.execute(
            text("SELECT name FROM sqlite_master WHERE type='table' AND sql LIKE 'CREATE VIRTUAL%'")
        )
        virtual = {r[0] for r in rows}
    return [n for n in names if is_managed_table(n, virtual) and n != "alembic_version"]
