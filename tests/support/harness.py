"""Runs the real bot (PTB Application, openai client, SQLite) against the loopback fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field
from sqlalchemy import select

from bot.adapter.app import on_shutdown, on_startup
from bot.adapter.context import App
from bot.adapter.vigil import process_vigil
from bot.adapter.watchdog import PollWatchdog, poll_watchdog
from bot.config.settings import Settings
from bot.process.fronts import build_telegram
from bot.runtime.services import Services
from bot.runtime.vigil import Vigil
from core_tools.types import ToolContext
from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.telegram_api import FakeTelegram

if TYPE_CHECKING:
    from bot.webapp.server import WebAppServer

TOKEN = "123456:TEST-TOKEN-abcdef"
OWNER = 111
FRIEND = 222
STRANGER = 999


# The database of a harness bot when the test names none: None is a SQLite file under tmp_path;
# the `bot_database` fixture (tests/conftest.py) sets a PostgreSQL database here for a test on PostgreSQL.
DATABASE_URL: str | None = None


def make_settings(tmp_path: Path, tg: FakeTelegram | None, llm: FakeLLM, **overrides: Any) -> Settings:
    """Settings pointing at the fakes and a database under tmp_path (or DATABASE_URL); no .env is read."""
    values: dict[str, Any] = {
        "telegram_bot_token": TOKEN,
        "telegram_api_base_url": tg.base_url if tg else "http://127.0.0.1:9/bot",
        "allowed_user_ids": f"{OWNER},{FRIEND}",
        "openai_api_key": "sk-test-key-123",
        "openai_base_url": llm.base_url,
        "llm_model": "fake-model",
        "llm_max_retries": 0,
        "llm_timeout_s": 10,
        "database_url": DATABASE_URL or f"sqlite:///{tmp_path / 'data' / 'assistant.db'}",
        "media_dir": str(tmp_path / "data" / "media"),
        "stream_edit_interval_s": 0.2,
        # Tests answer at once; the burst tests set a debounce of their own.
        "message_debounce_ms": 0,
        # Two messages a test sends one after the other are two turns, as a test of one message expects;
        # the tests of bursts fold them (tests/bot/test_fold.py).
        "message_fold_bursts": False,
        # No data toolkit (nothing is installed at start); the tests that use it pass the session's
        # (the `sandbox_toolkit` fixture).
        "code_python_env": "",
        # No background memory extraction during a test unless it asks (a short delay of its own): at the
        # default 60 s, a test slowed down by a loaded machine saw an extraction (after a durable-looking
        # message, or the catch-up at a restart) take the scripted LLM reply meant for its next turn.
        "memory_extract_delay_s": 3600.0,
    }
    values.update(overrides)
    return Settings(_env_file=None, **values)  # type: ignore[call-arg]


@dataclass
class Harness:
    """A running bot and its fakes."""

    tg: FakeTelegram
    llm: FakeLLM
    app: App
    settings: Settings
    # The long poll's (None when WATCHDOG_POLL_STALL_S=0); keyword-only, so subclasses may add fields.
    watchdog: PollWatchdog | None = field(default=None, kw_only=True)
    # The rest of the watchdog (bot/runtime/vigil/; None when WATCHDOG_TICK_S=0).
    vigil: Vigil | None = field(default=None, kw_only=True)

    @property
    def services(self) -> Services:
        """The running bot's services."""
        return self.app.bot_data.services

    @property
    def webapp(self) -> WebAppServer | None:
        """The app's web server (None without WEBAPP_LISTEN)."""
        return self.app.bot_data.webapp

    @property
    def app_url(self) -> str:
        """The address of the app's page (the bot started with webapp_listen="127.0.0.1:0")."""
        webapp = self.webapp
        assert webapp is not None, "start the bot with webapp_listen to use the app"
        return webapp.local_url

    async def final_text(self, chat_id: int, contains: str, timeout: float = 60.0) -> str:
        """Wait until a visible message in the chat contains `contains`; return it."""

        def found() -> str | None:
            return next((t for t in self.tg.sent_texts(chat_id) if contains in t), None)

        result: str = await self.tg.wait_for(
            found, timeout=timeout, what=f"a message containing {contains!r}"
        )
        return result

    async def command(self, user: int, command: str, contains: str) -> str:
        """Send a command and wait for the first new answer in the chat that contains `contains`."""
        before = len(self.tg.sent_texts(user))
        self.tg.push_text(user, command)

        def found() -> str | None:
            return next((t for t in self.tg.sent_texts(user)[before:] if contains in t), None)

        result: str = await self.tg.wait_for(found, what=f"an answer to {command!r} containing {contains!r}")
        return result


@asynccontextmanager
async def running_bot(
    tmp_path: Path,
    tg: FakeTelegram,
    llm: FakeLLM,
    *,
    setup: Callable[[Services], None] | None = None,
    **overrides: Any,
) -> AsyncIterator[Harness]:
    """Start the bot with long polling against the fakes, as `python -m bot` would; stop it afterwards."""
    settings = make_settings(tmp_path, tg, llm, **overrides)
    app = build_telegram(settings, adjust=setup)
    await app.initialize()
    await on_startup(app)
    await app.start()
    assert app.updater is not None
    polling: dict[str, Any] = {"poll_interval": 0, "timeout": 1}
    await app.updater.start_polling(**polling)
    watchdog = poll_watchdog(app, polling)  # as `python -m bot` watches its polling
    if watchdog is not None:
        watchdog.start()
    vigil = process_vigil(app, watchdog)
    if vigil is not None:
        vigil.start()
    try:
        yield Harness(tg, llm, app, settings, watchdog=watchdog, vigil=vigil)
    finally:
        llm.release_holds()  # a test that failed before releasing a held turn: the stop does not wait for it
        if vigil is not None:
            await vigil.aclose()
        if watchdog is not None:
            await watchdog.aclose()
        await app.updater.stop()
        await app.stop()
        await app.shutdown()
        await on_shutdown(app)  # as run_polling would: the app's web server, then the services


def rows(h: Harness, model: type) -> list[Any]:
    """Every row of a table of the running bot's database, in primary-key order."""
    table = model.__table__  # type: ignore[attr-defined]
    with h.services.engine.connect() as conn:
        # In key order: PostgreSQL returns rows in no particular order without one.
        return list(conn.execute(select(model).order_by(*table.primary_key.columns)).mappings())


def register_math(services: Services) -> None:
    """A test-only tool: `add` two integers (pass as `setup=` to `running_bot`)."""

    async def add(
        ctx: ToolContext, a: Annotated[int, Field(description="first")], b: int = 0
    ) -> dict[str, int]:
        """Add two integers."""
        return {"sum": a + b}

    services.registry.register(add)
