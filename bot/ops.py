"""Operations: `python -m bot doctor` checks everything a running bot needs; `python -m bot backup` copies
the SQLite database consistently while the bot runs (and explains pg_dump for PostgreSQL); `python -m bot
migrate-db` copies a SQLite database into PostgreSQL."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.engine import URL, make_url
from telegram import Bot
from telegram.error import InvalidToken, TelegramError

from bot.settings import Settings
from core_tools.errors import LLMUnavailable

if TYPE_CHECKING:  # the wiring (and what it imports) loads only for the full doctor, not the quick one
    from bot.wiring import Services


@dataclass(frozen=True)
class Check:
    """One line of the doctor's report."""

    name: str
    ok: bool
    detail: str

    def line(self) -> str:
        """`ok   name: detail` or `FAIL name: detail`."""
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}: {self.detail}"


def sqlite_path(database_url: str) -> Path | None:
    """The file of a SQLite URL, or None for other databases and in-memory ones."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return Path(url.database)


def check_database(settings: Settings) -> Check:
    """Migrate to head (as the bot does at start) and report the revision."""
    from db.engine import make_engine
    from db.migrate import current_revision, head_revision, upgrade

    try:
        upgrade(settings.database_url)
        engine = make_engine(settings.database_url)
        revision = current_revision(engine)
        engine.dispose()
    except Exception as exc:
        return Check(
            "database",
            False,
            f"{type(exc).__name__}: {exc}. Check DATABASE_URL and that the directory is writable",
        )
    head = head_revision()
    return Check(
        "database",
        revision == head,
        f"{make_url(settings.database_url).render_as_string(hide_password=True)} at revision {revision} "
        f"(head {head})",
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
        return Check("postgresql", False, f"{type(exc).__name__}: {exc}. Check DATABASE_URL")
    finally:
        engine.dispose()
    found = {r[0]: (r[1], r[2]) for r in rows}
    missing = [name for name in PG_EXTENSIONS if name not in found]
    if missing:
        return Check(
            "postgresql",
            False,
            f"PostgreSQL {version} lacks the extension(s) {', '.join(missing)}: install pgvector (and the "
            "contrib package for btree_gin) on the server, e.g. the pgvector/pgvector image or the "
            "postgresql-NN-pgvector package",
        )
    not_created = [name for name in PG_EXTENSIONS if found[name][0] is None]
    if not_created:
        return Check(
            "postgresql",
            False,
            f"PostgreSQL {version}: the extension(s) {', '.join(not_created)} are available but not created; "
            "the bot creates them when it migrates, which needs a role allowed to CREATE EXTENSION "
            "(or run `CREATE EXTENSION vector; CREATE EXTENSION btree_gin;` once as a superuser)",
        )
    return Check("postgresql", True, f"PostgreSQL {version}, pgvector {found['vector'][0]}")


async def check_telegram(settings: Settings) -> Check:
    """getMe against the configured Bot API."""
    if settings.telegram_bot_token is None:
        return Check("telegram", False, "TELEGRAM_BOT_TOKEN is not set")
    bot = Bot(settings.telegram_bot_token.get_secret_value(), base_url=settings.telegram_api_base_url)
    try:
        async with bot:
            me = await bot.get_me()
    except InvalidToken:
        return Check("telegram", False, "the Bot API rejected the token: copy it again from @BotFather")
    except TelegramError as exc:
        return Check(
            "telegram",
            False,
            f"could not reach the Bot API ({exc}); check the network and TELEGRAM_API_BASE_URL",
        )
    allowed = settings.allowed_user_ids or []
    detail = f"@{me.username}, {len(allowed)} allowed user(s)"
    if not allowed:
        return Check("telegram", False, f"{detail}: set ALLOWED_USER_IDS (message the bot to learn your id)")
    return Check("telegram", True, detail)


async def run_doctor(settings: Settings, quick: bool = False) -> list[Check]:
    """Every check; `quick` only the local ones (for a container health check)."""
    checks = [Check("settings", True, "loaded"), await asyncio.to_thread(check_database, settings)]
    postgres = await asyncio.to_thread(check_postgresql, settings)
    if postgres is not None:
        checks.append(postgres)
    if quick:
        return checks
    from bot.wiring import build_services

    checks.append(await check_telegram(settings))
    try:
        services = build_services(settings)
    except ValueError as exc:
        return [*checks, Check("services", False, str(exc))]
    try:
        try:
            checks.append(Check("llm", True, f"{settings.openai_base_url}: {await services.llm.check()}"))
        except LLMUnavailable as exc:
            checks.append(Check("llm", False, f"{settings.openai_base_url}: {exc}"))
        executor = services.code.executor
        from core_tools.sandbox import Isolation, describe
        from core_tools.sandbox.isolation import enable_hint

        isolated = executor.isolation == Isolation.BWRAP
        own = getattr(executor, "describe", None)  # the service client describes what the service reported
        text = own() if callable(own) else describe(executor)
        fix = "" if isolated else f" (to enable: {enable_hint(text)})"  # bwrap's own error is in the text
        checks.append(Check("sandbox", isolated, f"{text}{fix}"))
        checks.append(Check("search", True, services.search.describe()))
        embedder = services.memory.embedder
        try:
            assert embedder is not None
            vector = await embedder.embed_query("doctor")
            checks.append(Check("embedder", True, f"{embedder.id}, {len(vector)} dimensions"))
        except Exception as exc:
            checks.append(
                Check("embedder", False, f"{type(exc).__name__}: {exc}; recall falls back to keyword search")
            )
        checks.extend(await check_mcp(services))
    finally:
        await services.aclose()
    return checks


async def check_mcp(services: Services) -> list[Check]:
    """Connect each server of MCP_SERVERS_FILE once and list its tools: one line per server."""
    if services.mcp is None:
        return []
    await services.mcp.start()
    return [
        Check(f"mcp {st.spec.name}", st.state in ("connected", "disabled"), st.detail())
        for st in services.mcp.servers.values()
    ]


def backup(settings: Settings, target: Path) -> Path:
    """Copy the SQLite database with SQLite's online backup API: consistent even while the bot writes."""
    from db.engine import sqlite_module

    source = sqlite_path(settings.database_url)
    url = make_url(settings.database_url)
    if url.get_backend_name() == "postgresql":
        raise ValueError(pg_dump_advice(settings.database_url))
    if source is None:
        raise ValueError("backup works for a SQLite DATABASE_URL; use your database's own tools otherwise")
    if not source.exists():
        raise ValueError(f"there is no database at {source}")
    if target.exists():
        raise ValueError(f"{target} exists already; choose a new file name")
    target.parent.mkdir(parents=True, exist_ok=True)
    module = sqlite_module()
    src: sqlite3.Connection = module.connect(str(source))
    dst: sqlite3.Connection = module.connect(str(target))
    try:
        with dst:
            # One step: a stepped backup restarts whenever another connection writes, and under steady
            # writes never ends. In WAL mode one step reads a consistent snapshot without blocking writers.
            src.backup(dst)
    finally:
        dst.close()
        src.close()
    return target


def pg_dump_advice(database_url: str) -> str:
    """How to back up (and restore) a PostgreSQL DATABASE_URL with its own tools; no password shown."""
    url = make_url(database_url)
    bare = URL.create("postgresql", url.username, None, url.host, url.port, url.database, url.query)
    target = bare.render_as_string(hide_password=True)
    return (
        "DATABASE_URL is PostgreSQL: back it up with pg_dump, which reads one consistent snapshot while "
        f"the bot runs: `pg_dump --format=custom --file assistant-$(date +%F).dump '{target}'` (the password "
        "from PGPASSWORD or ~/.pgpass); restore into an empty database with `pg_restore --no-owner --dbname "
        "'postgresql://...' assistant-DATE.dump` (the pg_dump and pg_restore of the server's major version "
        "or newer, with pgvector installed on the restoring server)"
    )


def migrate_database(settings: Settings, target: str, say: Callable[[str], None]) -> bool:
    """Copy every table of DATABASE_URL into the PostgreSQL database `target` (safe to re-run); True when
    every table's row count agrees afterwards."""
    from db.engine import make_engine
    from db.transfer import copy_database

    url = make_url(target)
    if url.get_backend_name() != "postgresql":
        raise ValueError(
            "--to must be a PostgreSQL URL, e.g. postgresql+psycopg://user:password@host/assistant"
        )
    if url.drivername not in ("postgresql", "postgresql+psycopg"):
        raise ValueError("use the psycopg 3 driver: postgresql+psycopg://... (or plain postgresql://)")
    if make_url(settings.database_url) == url:
        raise ValueError("--to is DATABASE_URL itself")
    source, dest = make_engine(settings.database_url), make_engine(target)
    try:
        shown = make_url(settings.database_url).render_as_string(hide_password=True)
        say(f"copying {shown} into {url.render_as_string(hide_password=True)}")
        report = copy_database(source, dest, say=say)
    finally:
        source.dispose()
        dest.dispose()
    total = sum(t.source_rows for t in report.tables)
    if report.ok:
        say(f"done: {len(report.tables)} tables, {total} rows, every count agrees; safe to run again")
        say("next: set DATABASE_URL to the new database and start the bot")
    else:
        bad = ", ".join(t.name for t in report.tables if not t.ok)
        say(f"counts differ in: {bad} (rows deleted in the source since an earlier copy stay in the target)")
    return report.ok
