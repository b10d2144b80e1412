"""Entry point: `python -m bot` runs the Telegram bot; `python -m bot chat` chats in the terminal;
`python -m bot mcp` serves the bot's tools over MCP."""

from __future__ import annotations

import gc

# A start builds some 300,000 objects that live as long as the process (modules, classes, the services):
# the collections their allocation triggers walk them again and again, for nothing (~0.2 s of a start's
# CPU). The collector stays off until the bot polls (`settle_when_serving`); every other command turns it
# back on at once. (Imported, as by a test, this module leaves the collector alone.)
if __name__ == "__main__":
    gc.disable()

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlparse

from pydantic import ValidationError

from bot.config.settings import Settings, load_settings
from bot.process import heap
from bot.process.logs import Redactor, setup_logging
from bot.process.setting_errors import bad_fields, describe_errors, settings_without

if TYPE_CHECKING:
    from bot.adapter.context import App

T = TypeVar("T")

log = logging.getLogger("bot")


def _settings(telegram: bool, services: bool) -> Settings | None:
    """The settings, or None after one line per problem, every problem at once: each bad value, then (on
    the settings with those at their defaults) what running the Telegram bot needs and is not set, and
    the settings that are unusable together when the services will be built."""
    lines: list[str] = []
    reported: set[str] = set()
    settings: Settings | None
    try:
        settings = load_settings()
    except ValidationError as err:
        lines, reported = describe_errors(err), {f.upper() for f in bad_fields(err)}
        settings = settings_without(bad_fields(err))
    if settings is not None and telegram:
        _probe_sandbox_ahead(settings)
    if settings is not None:
        more = settings.missing_for_telegram() if telegram else []
        if services:
            from bot.process.parts import config_problems

            more += config_problems(settings)
        # A line about a bad value's consequence (its default stands in) would only repeat it.
        lines += [line for line in more if not any(var in line for var in reported)]
    for line in lines:
        print(line, file=sys.stderr)
    return None if lines else settings


def _probe_sandbox_ahead(settings: Settings) -> None:
    """A local code sandbox probes bwrap when it is made (a sandboxed python3: 0.1-0.3 s of waiting): that
    probe starts now, in a thread, and waits while the bot's modules are imported."""
    if not settings.sandbox_urls and not settings.code_sandbox_socket:
        from core_tools.sandbox.isolation import probe_bwrap_soon

        probe_bwrap_soon()


def _build(build: Callable[[], T]) -> T | None:
    """What `build` builds (a composition root of bot/process/wiring.py), or None after one line."""
    from bot.process.upgrade.errors import UpgradeFailed

    try:
        return build()
    except UpgradeFailed as exc:  # a database behind this code whose checked upgrade failed: one line
        print(exc.line(), file=sys.stderr)
        return None
    except ValueError as exc:  # an unusable combination of settings, e.g. a provider without its key
        print(f"Configuration error: {exc}.", file=sys.stderr)
        return None


class _HidePTBStartupTraceback(logging.Filter):
    """PTB logs a start-up failure with a traceback; `run_bot` reports it as one line instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        bootstrap = record.getMessage().startswith("Network Retry Loop (Bootstrap")
        return not (bootstrap and record.levelno >= logging.ERROR)


def startup_failure(exc: Exception, settings: Settings) -> str:
    """One line that says why the bot could not start and which setting to check; never a secret."""
    from telegram.error import InvalidToken

    cause = exc.__cause__ if isinstance(exc.__cause__, InvalidToken) else exc
    base = settings.telegram_api_base_url
    if isinstance(cause, InvalidToken) and "not found" in str(cause).lower():
        line = (
            f"Start-up failed: the Bot API answered 404 Not Found: check TELEGRAM_API_BASE_URL (now {base}) "
            "and TELEGRAM_BOT_TOKEN."
        )
    elif isinstance(cause, InvalidToken):
        line = "Start-up failed: Telegram refused the bot token (401 Unauthorized): check TELEGRAM_BOT_TOKEN."
    else:
        line = f"Start-up failed: the Bot API at {base} could not be used ({type(exc).__name__}: {exc})."
    return Redactor(settings.secrets()).mask(line)


def run_bot(settings: Settings) -> int:
    """Run the Telegram bot with long polling (or a webhook) until SIGINT/SIGTERM; 1 if it cannot start."""
    from telegram.error import TelegramError

    from bot.process.fronts import build_telegram

    app = _build(lambda: build_telegram(settings))
    if app is None:
        return 2
    settle_when_serving(app)
    ptb_log = logging.getLogger("telegram.ext")
    ptb_log.addFilter(_HidePTBStartupTraceback())
    try:
        code = _serve(settings, app)
    except TelegramError as exc:  # bad token, wrong base URL, no network: one line, no traceback
        print(startup_failure(exc, settings), file=sys.stderr)
        return 1
    log.info("stopped")
    return code


SETTLE_AFTER_S = 1.0  # after the start-up hook: the first getUpdates goes out well before (~20 ms)


def settle_when_serving(app: App, delay_s: float = SETTLE_AFTER_S) -> None:
    """Once the application has started (its post_init hook ran: the services started, the menus are
    published) and is about to poll: import what only a turn needs (the OpenAI SDK, core_tools/llm/sdk.py)
    in a worker thread, then collect what start-up left and freeze the rest (bot/process/heap.py) and turn
    the collector back on. Both come after the first poll, not before it."""
    startup = app.post_init

    async def post_init(application: App) -> None:
        try:
            if startup is not None:
                await startup(application)
        finally:
            asyncio.get_running_loop().call_later(delay_s, lambda: _warm_then_settle(application))

    app.post_init = post_init


def _warm_then_settle(app: App) -> None:
    from core_tools.llm.sdk import warm

    async def go() -> None:
        try:
            await warm()
        finally:
            _settle()

    if app.running:  # not while stopping
        app.create_task(go(), name="warm-up")
    else:
        _settle()


def _settle() -> None:
    heap.settle()
    gc.enable()


def _serve(settings: Settings, app: App) -> int:
    """Serve until stopped; the exit code (the poll's watchdog gave up: bot/adapter/watchdog.py)."""
    from telegram import Update

    from bot.adapter.vigil import watch_process
    from bot.adapter.watchdog import EXIT_POLL_STALLED, watch_when_polling

    log.info(
        "starting: model %s at %s, %d allowed user(s), database %s",
        settings.llm_model,
        settings.openai_base_url,
        len(settings.allowed_user_ids or []),
        settings.database_url,
    )
    if not settings.allowed_user_ids:
        log.warning("ALLOWED_USER_IDS is empty: everyone is refused and told their user id")
    # SIGINT/SIGTERM stop the application; PTB then finishes the updates being handled before it exits.
    # A turn cut harder than that (SIGKILL) stays "pending" and the user is told at the next start.
    if settings.telegram_webhook_url:
        assert settings.telegram_webhook_secret is not None
        path = urlparse(settings.telegram_webhook_url).path.strip("/")
        log.info(
            "webhook mode: listening on %s:%d/%s",
            settings.telegram_webhook_listen,
            settings.telegram_webhook_port,
            path,
        )
        watch_process(app, webhook=True)  # the rest of the watchdog (bot/runtime/vigil/)
        app.run_webhook(
            listen=settings.telegram_webhook_listen,
            port=settings.telegram_webhook_port,
            url_path=path,
            webhook_url=settings.telegram_webhook_url,
            secret_token=settings.telegram_webhook_secret.get_secret_value(),
            allowed_updates=Update.ALL_TYPES,
        )
    else:
        polling: dict[str, Any] = {"allowed_updates": Update.ALL_TYPES}
        dog = watch_when_polling(app, polling)
        watch_process(app, dog)
        app.run_polling(**polling)
        if dog is not None and dog.gave_up:
            return EXIT_POLL_STALLED
    return 0


def run_doctor(settings: Settings, quick: bool, timeout_s: float) -> int:
    """Print one line per check; exit 1 if any failed (a warning is not a failure)."""
    from bot.process.ops import run_doctor as doctor

    async def go() -> int:
        checks = await doctor(settings, quick=quick, timeout_s=timeout_s)
        for check in checks:
            print(check.line(), flush=True)
        code = 0 if all(c.ok for c in checks) else 1
        if any(c.timed_out for c in checks):
            # A probe that did not answer may still hold a thread (a database connect): the report is
            # out, and waiting for it is what `timeout_s` was to prevent.
            sys.stderr.flush()
            os._exit(code)
        return code

    return asyncio.run(go())


def run_backup(settings: Settings, target: str) -> int:
    """Copy the database to `target` while the bot may be running."""
    from bot.process.ops import backup

    try:
        path = backup(settings, Path(target))
    except ValueError as exc:
        print(f"Backup failed: {exc}.", file=sys.stderr)
        return 1
    print(f"Backup written to {path} ({path.stat().st_size} bytes).")
    return 0


def run_migrate_db(settings: Settings, target: str) -> int:
    """Copy every table of DATABASE_URL into the PostgreSQL database `target`; 1 if the counts disagree."""
    from bot.process.ops import migrate_database

    redact = Redactor(settings.secrets() + _url_secrets(target)).mask
    try:
        ok = migrate_database(settings, target, say=lambda line: print(redact(line)))
    except ValueError as exc:
        print(redact(f"migrate-db failed: {exc}."), file=sys.stderr)
        return 2
    except Exception as exc:  # the target refused: unreachable, no pgvector, no rights
        print(redact(f"migrate-db failed: {type(exc).__name__}: {exc}"), file=sys.stderr)
        return 1
    return 0 if ok else 1


def _url_secrets(url: str) -> list[str]:
    from sqlalchemy.engine import make_url

    try:
        password = make_url(url).password
    except Exception:
        return []
    return [str(password)] if password else []


def run_chat(settings: Settings, out_dir: str | None = None) -> int:
    """Chat in the terminal as the owner (OWNER_USER_ID, else the first allowed user; user 0 without any);
    files of code runs go to `out_dir` (default TERMINAL_OUT_DIR)."""
    from bot.process.fronts import build_terminal

    chat = _build(
        lambda: build_terminal(settings, settings.owner_id or 0, Path(out_dir or settings.terminal_out_dir))
    )
    if chat is None:
        return 2
    services = chat.services

    async def go() -> None:
        try:
            await chat.start()
            await chat.run()
        finally:
            await chat.close()
            await services.aclose()

    asyncio.run(go())
    return 0


def run_webapp_link(settings: Settings, user_id: int, url: str | None, dark: bool) -> int:
    """Print a link that opens the app as `user_id` (signed like Telegram's launch data) for a browser."""
    from bot.webapp.link import signed_link

    address = settings.webapp_address
    if url is None and address is None:
        print("webapp-link: set WEBAPP_LISTEN (e.g. 127.0.0.1:8090), or give --url.", file=sys.stderr)
        return 2
    if settings.telegram_bot_token is None:
        print("webapp-link: TELEGRAM_BOT_TOKEN is missing: the link is signed with it.", file=sys.stderr)
        return 2
    if user_id not in (settings.allowed_user_ids or []):
        print(
            f"webapp-link: note: {user_id} is not in ALLOWED_USER_IDS; the app will refuse it.",
            file=sys.stderr,
        )
    if url is None:
        assert address is not None
        host = "127.0.0.1" if address[0] in ("0.0.0.0", "::", "") else address[0]  # noqa: S104
        url = f"http://{f'[{host}]' if ':' in host else host}:{address[1]}/"
    token = settings.telegram_bot_token.get_secret_value()
    print(signed_link(url, token, {"id": user_id, "first_name": f"User {user_id}"}, dark=dark))
    print(
        f"(valid for {settings.webapp_auth_max_age_s} s; whoever has it is this user until then)",
        file=sys.stderr,
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run."""
    parser = argparse.ArgumentParser(prog="python -m bot", description="A personal assistant in Telegram.")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("run", help="run the Telegram bot (the default)")
    chat = sub.add_parser("chat", help="chat in the terminal, as the owner")
    chat.add_argument(
        "--out", metavar="DIR", help="save the files code runs write here (default: TERMINAL_OUT_DIR)"
    )
    doctor = sub.add_parser(
        "doctor", help="check settings, Bot API, LLM, database, sandbox, search, embedder"
    )
    doctor.add_argument("--quick", action="store_true", help="only local checks (settings and database)")
    doctor.add_argument(
        "--timeout", type=float, default=10.0, help="seconds each probe may take to answer (default 10)"
    )
    backup = sub.add_parser(
        "backup",
        help="copy the SQLite database consistently while the bot runs (PostgreSQL: explains pg_dump)",
    )
    backup.add_argument(
        "target",
        nargs="?",
        help="a new SQLite file for a plain copy; without it, a full backup (database and media, encrypted "
        "for BACKUP_AGE_RECIPIENTS) into BACKUP_DIR",
    )
    migrate = sub.add_parser(
        "migrate-db", help="copy every table of DATABASE_URL into another database (SQLite <-> PostgreSQL)"
    )
    migrate.add_argument(
        "--to",
        required=True,
        help="the target, e.g. postgresql+psycopg://user:pw@host/db or sqlite:///new.db",
    )
    from bot.process.backup_cli import COMMANDS as DATA_COMMANDS
    from bot.process.backup_cli import add_commands

    add_commands(sub)
    from bot.process.upgrade.cli import COMMANDS as UPGRADE_COMMANDS
    from bot.process.upgrade.cli import add_commands as upgrade_commands

    upgrade_commands(sub)
    from bot.process.mcp_serve import add_arguments as mcp_arguments

    mcp_arguments(
        sub.add_parser(
            "mcp",
            help="serve the bot's tools (search, fetch, code, memory, read_result) over MCP, as one user",
            description="Serve the assistant's tools over MCP, as one user: the same sandbox, execution "
            "log, memory, caps and accounting as in Telegram.",
        )
    )
    memory_check = sub.add_parser(
        "memory-check",
        help="repair and measure how findable each user's memories are (what the nightly check does)",
    )
    memory_check.add_argument("user", nargs="?", metavar="USER", help="one user's id (default: every user)")
    link = sub.add_parser(
        "webapp-link", help="print a signed link that opens the app as a user, for a browser (testing)"
    )
    link.add_argument("user_id", type=int, help="the Telegram user id to open it as")
    link.add_argument("--url", help="the page's address (default: http://WEBAPP_LISTEN/)")
    link.add_argument("--dark", action="store_true", help="with Telegram's dark theme")
    args = parser.parse_args(argv)
    telegram = args.command in (None, "run")
    if not telegram:  # only the bot turns it on later (`settle_when_serving`)
        gc.enable()
    # The doctor reports settings that are unusable together as its own failing line, with the rest.
    settings = _settings(telegram, services=telegram or args.command in ("chat", "mcp", "memory-check"))
    if settings is None:
        return 2
    setup_logging(settings.log_level, settings.secrets())
    quiet: tuple[str, ...] = ("chat", "doctor", "backup", "migrate-db", "webapp-link", "memory-check")
    quiet += (*DATA_COMMANDS, *UPGRADE_COMMANDS)
    if args.command in quiet:
        logging.getLogger().setLevel(logging.WARNING)  # keep the terminal for the output
    if args.command in ("chat", "mcp"):  # stdout is the conversation (the protocol): logs go to stderr
        for handler in logging.getLogger().handlers:
            if isinstance(handler, logging.StreamHandler) and handler.stream is sys.stdout:
                handler.setStream(sys.stderr)
    if args.command == "chat":
        return run_chat(settings, args.out)
    if args.command == "mcp":
        from bot.process.mcp_serve import run as run_mcp

        return run_mcp(settings, args)
    if args.command == "doctor":
        return run_doctor(settings, args.quick, args.timeout)
    if args.command == "backup" and args.target is None:
        from bot.process.backup_cli import run_full_backup

        return run_full_backup(settings)
    if args.command == "backup":
        return run_backup(settings, args.target)
    if args.command in DATA_COMMANDS:
        from bot.process.backup_cli import dispatch

        return dispatch(settings, args)
    if args.command == "migrate-db":
        return run_migrate_db(settings, args.to)
    if args.command in UPGRADE_COMMANDS:
        from bot.process.upgrade.cli import dispatch as upgrade_dispatch

        return upgrade_dispatch(settings, args)
    if args.command == "memory-check":
        from bot.process.memory_check_cli import run as run_memory_check

        return run_memory_check(settings, args.user)
    if args.command == "webapp-link":
        return run_webapp_link(settings, args.user_id, args.url, args.dark)
    return run_bot(settings)


if __name__ == "__main__":
    sys.exit(main())
