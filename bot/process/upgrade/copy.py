"""The copy of the database an upgrade is tried on, never the live one.

SQLite: a consistent copy of the file with SQLite's online backup API (as `python -m bot backup FILE`),
into a private scratch folder beside it (the same disk), deleted afterwards.

PostgreSQL: a scratch database on the same server (`<name>_upgrade_trial`, made with CREATE DATABASE, so
the role needs CREATEDB), migrated to the live database's revision and filled with its rows from one
REPEATABLE READ, READ ONLY snapshot (the copy machinery of `python -m bot migrate-db` and of backups,
db/transfer.py), then dropped. The live database is only read. The other way, one transaction of Alembic
and the self-test rolled back, would hold the migration's locks on the live tables (ACCESS EXCLUSIVE for
most DDL) for the whole self-test, stopping a bot that still runs on it; the scratch copy costs a copy of
the rows instead and stops nobody. Measured on the test server (embedded PostgreSQL 18, a loaded 2-core
box): 10,000 messages of 20 users with their memories, schedules and files copied in 9.2 s (the schema
made by the 27 migrations included), the copy migrated in 0.1 s and dropped in 1.0 s; the backup's
snapshot of the same database, taken before, 7.8 s.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from core_tools.backup.store import scratch
from db.engine import make_engine
from db.migrate import upgrade
from db.snapshot import copy_sqlite_file, sqlite_url
from db.transfer import CopyReport, copy_tables, match_vector_dim

Say = Callable[[str], None]
TRIAL_SUFFIX = "_upgrade_trial"


@contextmanager
def trial_database(database_url: str, revision: str | None, say: Say) -> Iterator[str]:
    """A copy of the database at `revision` (its own), as a URL, deleted when the block ends."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite":
        source = Path(url.database or "")
        if not url.database or url.database == ":memory:" or not source.exists():
            raise ValueError(f"there is no database at {url.database}")
        with scratch(source.parent) as folder:
            copy = folder / "trial.sqlite"
            copy_sqlite_file(source, copy)
            say(f"copied the database to {copy}")
            yield sqlite_url(copy)
        return
    with _postgres_trial(database_url, revision, say) as trial:
        yield trial


def _trial_name(database: str) -> str:
    base = re.sub(r"[^a-z0-9_]", "_", database.lower())[: 63 - len(TRIAL_SUFFIX)]
    return f"{base}{TRIAL_SUFFIX}"


@contextmanager
def _postgres_trial(database_url: str, revision: str | None, say: Say) -> Iterator[str]:
    url = make_url(database_url)
    name = _trial_name(url.database or "assistant")
    trial_url = url.set(database=name).render_as_string(hide_password=False)
    live = make_engine(database_url)
    try:
        with live.connect().execution_options(isolation_level="AUTOCOMMIT") as admin:
            # A trial a killed upgrade left (the upgrade lock is held: no other upgrade uses it now).
            try:
                admin.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
                admin.execute(text(f'CREATE DATABASE "{name}"'))
            except DBAPIError as exc:
                if "permission denied" not in str(exc.orig):
                    raise
                raise ValueError(
                    f"the role may not create the scratch database {name} the upgrade is tried on: give it "
                    f"CREATEDB (ALTER ROLE {url.username} CREATEDB), or set UPGRADE_CHECK=off to migrate "
                    "without the check"
                ) from None
        try:
            upgrade(trial_url, revision or "head")
            trial = make_engine(trial_url)
            try:
                with (
                    live.connect().execution_options(isolation_level="REPEATABLE READ") as src,
                    trial.connect() as dst,
                ):
                    src.execute(text("SET TRANSACTION READ ONLY"))  # one snapshot of every table
                    match_vector_dim(src, dst)
                    report = CopyReport()
                    copy_tables(src, dst, report, commit=False)
                    if not report.ok:
                        bad = ", ".join(t.name for t in report.tables if not t.ok)
                        raise ValueError(f"the copy's row counts differ in {bad}")
                    dst.commit()
                    src.rollback()
            finally:
                trial.dispose()
            say(f"copied the database into the scratch database {name}")
            yield trial_url
        finally:
            with live.connect().execution_options(isolation_level="AUTOCOMMIT") as admin:
                admin.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        live.dispose()
