"""Operations: `python -m bot doctor` checks everything a running bot needs; `python -m bot backup` copies
the SQLite database consistently while the bot runs."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy.engine import make_url
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
        "database", revision == head, f"{settings.database_url} at revision {revision} (head {head})"
    )


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
