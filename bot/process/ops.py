"""Operations: `python -m bot doctor` checks everything a running bot needs; `python -m bot backup` copies
the SQLite database consistently while the bot runs (and explains pg_dump for PostgreSQL); `python -m bot
migrate-db` copies a SQLite database into PostgreSQL."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
from sqlalchemy.engine import URL, make_url
from telegram import Bot
from telegram.error import InvalidToken, TelegramError

from bot.config.settings import Settings
from bot.process.app_probe import bounded_check_app
from bot.process.checks import Check
from bot.process.db_checks import check_postgresql, check_toolkit, revision_check
from bot.process.vigil_checks import check_process, check_watchdog
from core_tools.errors import LLMUnavailable
from core_tools.text import clip

if TYPE_CHECKING:  # the wiring (and what it imports) loads only for the full doctor, not the quick one
    from bot.runtime.services import Services
    from core_tools.tools.search_providers.base import SearchProvider


def sqlite_path(database_url: str) -> Path | None:
    """The file of a SQLite URL, or None for other databases and in-memory ones."""
    url = make_url(database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    return Path(url.database)


def check_database(settings: Settings) -> Check:
    """Bring the database to head as the bot does at start (one behind through the checked upgrade,
    bot/process/upgrade/) and report the revision."""
    from bot.process.upgrade.start import ensure_schema

    try:
        ensure_schema(settings)
    except Exception as exc:
        return Check(
            "database",
            False,
            f"{type(exc).__name__}: {exc}",
            "check DATABASE_URL, that the database server runs, and that the directory is writable",
        )
    return revision_check(settings)


def check_version(settings: Settings) -> Check:
    """The running code's version and when the database was last upgraded (table `upgrades`)."""
    from bot.runtime.version import version_line
    from db.engine import make_engine
    from db.upgrades import last_upgrade

    engine = make_engine(settings.database_url)
    try:
        last = last_upgrade(engine)
    except Exception as exc:  # the database line says what is wrong with it
        return Check("version", True, f"{version_line(None)} (upgrades not read: {type(exc).__name__})")
    finally:
        engine.dispose()
    if last is None:
        return Check("version", True, f"{version_line(None)}, no upgrade recorded")
    line = version_line(last.upgraded_at, last.from_version)
    return Check(
        "version", True, f"{line} (schema {last.from_revision} -> {last.to_revision}, backup {last.backup})"
    )


async def check_telegram(settings: Settings) -> Check:
    """getMe against the configured Bot API; an empty allowlist is a warning (the README's first step)."""
    if settings.telegram_bot_token is None:
        return Check(
            "telegram", False, "TELEGRAM_BOT_TOKEN is not set", "put the token @BotFather gave you in it"
        )
    bot = Bot(settings.telegram_bot_token.get_secret_value(), base_url=settings.telegram_api_base_url)
    try:
        async with bot:
            me = await bot.get_me()
    except InvalidToken:
        return Check("telegram", False, "the Bot API rejected the token", "copy it again from @BotFather")
    except TelegramError as exc:
        return Check(
            "telegram",
            False,
            f"could not reach the Bot API ({exc})",
            f"check the network and TELEGRAM_API_BASE_URL (now {settings.telegram_api_base_url})",
        )
    allowed = settings.allowed_user_ids or []
    if not allowed:
        return Check(
            "telegram",
            True,
            f"@{me.username}, no allowed users: everyone is refused and told their user id",
            "message the bot, put the id it tells you in ALLOWED_USER_IDS and restart",
            warning=True,
        )
    return Check("telegram", True, f"@{me.username}, {len(allowed)} allowed user(s)")


async def _bounded(name: str, probe: Awaitable[Check], timeout_s: float, fix: str) -> Check:
    """A probe that has `timeout_s` to answer; past it, a failure saying so (and what to check)."""
    try:
        async with asyncio.timeout(timeout_s):
            return await probe
    except TimeoutError:
        return Check(name, False, f"no answer within {timeout_s:g} s", fix, timed_out=True)


async def check_llm(settings: Settings, services: Services) -> Check:
    """GET /models at the endpoint (no tokens spent): reachable, key accepted, model listed."""
    base = settings.openai_base_url
    try:
        status = await services.llm.check()
    except LLMUnavailable as exc:
        reason = str(exc)
        if "API key" in reason:
            fix = "put the endpoint's key in OPENAI_API_KEY"
        elif "not found" in reason:
            fix = f"check OPENAI_BASE_URL (now {base}; usually it ends in /v1) and LLM_MODEL"
        else:
            fix = f"start the LLM server or correct OPENAI_BASE_URL (now {base}), and check the network"
        return Check("llm", False, f"{base}: {reason}", fix)
    if "does not list the model" in status:
        return Check(
            "llm", True, f"{base}: {status}", "set LLM_MODEL to a model the endpoint serves", warning=True
        )
    return Check("llm", True, f"{base}: {status}")


async def check_sandbox(services: Services) -> Check:
    """One real run of `print` in the sandbox (or the sandbox service), next to its description."""
    from core_tools.sandbox import Isolation, describe
    from core_tools.sandbox.isolation import enable_hint

    executor = services.code.executor
    own = getattr(executor, "describe", None)  # the service client describes what the service reported
    text = own() if callable(own) else describe(executor)
    if executor.isolation is Isolation.UNAVAILABLE:
        return Check("sandbox", False, text, enable_hint(text))  # bwrap's own error is in the text
    try:
        result = await executor.run("print('sandbox-ok')", "python", 30.0)
    except Exception as exc:  # a service that went away between hello and run
        fix = "check the sandbox service and its logs"
        return Check("sandbox", False, f"{text}: a run failed ({exc})", fix)
    if not result.success or result.stdout.strip() != "sandbox-ok":
        why = (result.stderr or result.stdout).strip().splitlines()[-1:] or [f"exit {result.exit_code}"]
        detail = f"{text}: a test run failed ({clip(why[0], 200)})"
        return Check("sandbox", False, detail, enable_hint(why[0]))
    if executor.isolation is not Isolation.BWRAP:
        return Check("sandbox", False, text, enable_hint(text))
    notes = getattr(executor, "limit_notes", None)  # a sandbox service's limits over this bot's settings
    overruled = notes() if callable(notes) else []
    if overruled:
        fix = (
            "set these to the service's values or leave them out: the service's own options (--timeout, "
            "--max-timeout, --memory-mb) decide every run, and a service gives runs no network"
        )
        return Check("sandbox", True, f"{text}; " + "; ".join(overruled), fix, warning=True)
    return Check("sandbox", True, text)


_SEARCH_FIXES = {
    "searxng": "check SEARXNG_URL (now {url}) and that SearXNG runs with its JSON format enabled "
    "(deploy/searxng/settings.yml)",
    "brave": "check BRAVE_API_KEY and that this machine reaches api.search.brave.com",
    "tavily": "check TAVILY_API_KEY and that this machine reaches api.tavily.com",
    "duckduckgo": "check that this machine reaches the internet, or run a SearXNG and set SEARXNG_URL",
}


async def check_search(settings: Settings, services: Services, timeout_s: float) -> Check:
    """One query to each provider of the chain at once: search works when one of them answers."""

    async def ask(provider: SearchProvider) -> str | None:
        try:
            async with asyncio.timeout(timeout_s):
                await provider.search("weather", "web", 1)
        except TimeoutError:
            return f"no answer within {timeout_s:g} s"
        except httpx.TimeoutException:  # the search client's own timeout came first
            return f"no answer within {settings.search_timeout_s:g} s (SEARCH_TIMEOUT_S)"
        except Exception as exc:  # ProviderError, httpx errors: the reason without a traceback
            return clip(str(exc), 160) or type(exc).__name__
        return None

    providers = services.search.providers
    failures = await asyncio.gather(*(ask(p) for p in providers))
    pairs = list(zip(providers, failures, strict=True))
    parts = [f"{p.name} {'answered' if why is None else why}" for p, why in pairs]
    fixes = [
        _SEARCH_FIXES.get(p.name, "check its settings").format(url=settings.searxng_url)
        for p, why in pairs
        if why is not None
    ]
    detail = "; ".join(parts)
    if all(why is not None for why in failures):
        return Check("search", False, detail, "; ".join(fixes))
    if fixes:  # the chain falls over to one that answers
        return Check("search", True, detail, "; ".join(fixes), warning=True)
    return Check("search", True, detail)


async def check_embedder(settings: Settings, services: Services) -> Check:
    """Embed one query with the configured embedder."""
    embedder = services.memory.embedder
    try:
        assert embedder is not None
        vector = await embedder.embed_query("doctor")
    except Exception as exc:
        fix = (
            "check EMBEDDINGS_BASE_URL, EMBEDDINGS_MODEL and EMBEDDINGS_API_KEY"
            if settings.embeddings_base_url
            else "reinstall the dependencies (uv sync --frozen)"
        )
        return Check(
            "embedder", False, f"{type(exc).__name__}: {exc} (recall falls back to keyword search)", fix
        )
    return Check("embedder", True, f"{embedder.id}, {len(vector)} dimensions")


DOCTOR_TIMEOUT_S = 10.0


async def run_doctor(
    settings: Settings, quick: bool = False, timeout_s: float = DOCTOR_TIMEOUT_S
) -> list[Check]:
    """Every check, probing at once, each bounded by `timeout_s` (the database by three times that);
    `quick` only the local ones (for a container health check)."""
    tg_fix = "check the network and TELEGRAM_API_BASE_URL"
    telegram = None
    if not quick:  # the slowest probe to answer, started first
        telegram = asyncio.create_task(_bounded("telegram", check_telegram(settings), timeout_s, tg_fix))
    db_fix = "check DATABASE_URL and that the database server runs"
    checks = [
        Check("settings", True, "loaded"),
        await _bounded("database", asyncio.to_thread(check_database, settings), 3 * timeout_s, db_fix),
    ]
    if checks[1].ok:
        checks.append(await asyncio.to_thread(check_version, settings))
    if make_url(settings.database_url).get_backend_name() == "postgresql":
        checks.append(
            await _bounded("postgresql", asyncio.to_thread(_postgresql, settings), 3 * timeout_s, db_fix)
        )
    process = check_process(settings)  # the running bot's health file (HEALTH_FILE): a file read
    if process is not None:
        checks.append(process)
    if telegram is None:
        return checks
    if not checks[1].ok:  # the services migrate the same database: nothing more to learn from them
        return [*checks, await telegram]
    checks.append(
        await _bounded("watchdog", asyncio.to_thread(check_watchdog, settings), 3 * timeout_s, db_fix)
    )
    from bot.process.wiring import build_services

    try:
        services = await asyncio.to_thread(build_services, settings)
    except Exception as exc:
        fix = "correct the setting it names (see .env.example)"
        return [*checks, await telegram, Check("services", False, f"{exc}", fix)]
    try:
        mcp = asyncio.create_task(check_mcp(services))  # bounded by its own connect timeout
        network = "check the network and that it runs"
        probes = await asyncio.gather(
            telegram,
            _bounded("llm", check_llm(settings, services), timeout_s, f"check OPENAI_BASE_URL; {network}"),
            _bounded("sandbox", check_sandbox(services), timeout_s, "check bwrap or the sandbox service"),
            _bounded("toolkit", check_toolkit(services), timeout_s, "check the sandbox and CODE_PYTHON_ENV"),
            check_search(settings, services, timeout_s),
            _bounded("embedder", check_embedder(settings, services), timeout_s, "check EMBEDDINGS_BASE_URL"),
            bounded_check_app(settings, timeout_s),
        )
        return [*checks, *probes, *await mcp, check_tools(services)]
    finally:
        await services.aclose()


def _postgresql(settings: Settings) -> Check:
    check = check_postgresql(settings)
    assert check is not None
    return check


def check_tools(services: Services) -> Check:
    """Every registered tool with what it reads and writes (core_tools.capabilities), and which of them
    wait for the user's approval (APPROVE_TOOLS, an MCP server's `confirm`)."""
    registry, gate = services.registry, services.approvals
    parts = []
    for name in registry.names:
        tool = registry.get(name)
        assert tool is not None
        caps = tool.capabilities.describe() if tool.capabilities is not None else "capabilities not declared"
        asks = gate is not None and gate.policy.needs(name, tool)
        parts.append(f"{name} ({caps}{'; asks approval' if asks else ''})")
    undeclared = [n for n in registry.names if (t := registry.get(n)) is not None and t.capabilities is None]
    return Check(
        "tools",
        True,
        f"{len(parts)} registered: " + ", ".join(parts),
        "declare what they read and write (core_tools.capabilities.declares)" if undeclared else "",
        warning=bool(undeclared),
    )


async def check_mcp(services: Services) -> list[Check]:
    """Connect each server of MCP_SERVERS_FILE once and list its tools: one line per server."""
    if services.mcp is None:
        return []
    await services.mcp.start()
    fix = "check its entry in MCP_SERVERS_FILE and start its command (or open its url) by hand to see why"
    return [
        Check(f"mcp {st.spec.name}", st.state in ("connected", "disabled"), st.detail(), fix)
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
    source_kind = make_url(settings.database_url).get_backend_name()
    if url.get_backend_name() == "sqlite":
        # PostgreSQL to SQLite (moving back to one machine): a new file, never over an existing database.
        if source_kind != "postgresql":
            raise ValueError(
                "--to must be a PostgreSQL URL when DATABASE_URL is SQLite (--to sqlite:///... moves a "
                "PostgreSQL DATABASE_URL to SQLite)"
            )
        if not url.database or Path(url.database).exists():
            raise ValueError(f"--to must name a new SQLite file ({url.database} exists already)")
    elif url.get_backend_name() != "postgresql":
        raise ValueError(
            "--to must be a PostgreSQL URL (postgresql+psycopg://user:password@host/assistant) or, from "
            "PostgreSQL, a new SQLite file (sqlite:///data/assistant.db)"
        )
    elif url.drivername not in ("postgresql", "postgresql+psycopg"):
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
