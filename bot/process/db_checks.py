"""The doctor's probes of the database and the toolkit that change nothing: the upgrade's self-test runs them
on its migrated copy (bot/process/upgrade/selftest.py), `python -m bot doctor` on the live database
(bot/process/ops.py, after bringing it to head)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy.engine import make_url

from bot.config.settings import Settings
from bot.process.checks import Check

if TYPE_CHECKING:
    from bot.runtime.services import Services


def revision_check(settings: Settings) -> Check:
    """The database's schema revision against this code's newest."""
    from db.engine import make_engine
    from db.migrate import current_revision, head_revision

    try:
        engine = make_engine(settings.database_url)
        try:
            revision = current_revision(engine)
        finally:
            engine.dispose()
    except Exception as exc:
        return Check(
            "database",
            False,
            f"{type(exc).__name__}: {exc}",
            "check DATABASE_URL, that the database server runs, and that the directory is writable",
        )
    head = head_revision()
    return Check(
        "database",
        revision == head,
        f"{make_url(settings.database_url).render_as_string(hide_password=True)} at revision {revision} "
        f"(head {head})",
        "this code is older than the database: run the newest version of the bot",
    )


# What recall needs on PostgreSQL (migrations 0002 and 0004 create them).
PG_EXTENSIONS = ("vector", "btree_gin")


def check_postgresql(settings: Settings) -> Check | None:
    """For a PostgreSQL DATABASE_URL: the server's version and the extensions recall needs; else None."""
    from sqlalchemy import text

    from db.engine import make_engine

    if make_url(settings.database_url).get_backend_name() != "postgresql":
        return None
    engine = make_engine(settings.database_url)
    try:
        with engine.connect() as conn:
            version = conn.execute(text("SHOW server_version")).scalar()
            rows = conn.execute(
                text(
                    "SELECT name, installed_version, default_version FROM pg_available_extensions "
                    "WHERE name IN ('vector', 'btree_gin')"
                )
            ).all()
    except Exception as exc:
        return Check(
            "postgresql", False, f"{type(exc).__name__}: {exc}", "check DATABASE_URL and that the server runs"
        )
    finally:
        engine.dispose()
    found = {r[0]: (r[1], r[2]) for r in rows}
    missing = [name for name in PG_EXTENSIONS if name not in found]
    if missing:
        return Check(
            "postgresql",
            False,
            f"PostgreSQL {version} lacks the extension(s) {', '.join(missing)}",
            "install pgvector (and the contrib package for btree_gin) on the server, e.g. the "
            "pgvector/pgvector image or the postgresql-NN-pgvector package",
        )
    not_created = [name for name in PG_EXTENSIONS if found[name][0] is None]
    if not_created:
        return Check(
            "postgresql",
            False,
            f"PostgreSQL {version}: the extension(s) {', '.join(not_created)} are available but not created",
            "the bot creates them when it migrates, which needs a role allowed to CREATE EXTENSION (or run "
            "`CREATE EXTENSION vector; CREATE EXTENSION btree_gin;` once as a superuser)",
        )
    return Check("postgresql", True, f"PostgreSQL {version}, pgvector {found['vector'][0]}")


async def check_toolkit(services: Services) -> Check:
    """numpy, pandas and matplotlib imported in a real sandboxed run (what Python code can use)."""
    if services.toolkit is None:
        return Check("toolkit", True, "not used by this executor")
    report = await services.toolkit.probe()
    return Check("toolkit", report.level != "fail", report.detail, report.fix, warning=report.level == "warn")
