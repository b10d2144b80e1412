"""Entry point: `python -m bot` runs the Telegram bot; `python -m bot chat` chats in the terminal."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import TYPE_CHECKING

from pydantic import ValidationError

from bot.logs import setup_logging
from bot.settings import Settings, describe_errors, load_settings

if TYPE_CHECKING:
    from bot.wiring import Services

log = logging.getLogger("bot")


def _settings() -> Settings | None:
    try:
        return load_settings()
    except ValidationError as err:
        for line in describe_errors(err):
            print(line, file=sys.stderr)
        return None


def _build(settings: Settings) -> Services | None:
    from bot.wiring import build_services

    try:
        return build_services(settings)
    except ValueError as exc:  # an unusable combination of settings, e.g. a provider without its key
        print(f"Configuration error: {exc}.", file=sys.stderr)
        return None


def run_bot(settings: Settings) -> int:
    """Run the Telegram bot with long polling until SIGINT/SIGTERM."""
    from telegram import Update

    from bot.app import build_application

    services = _build(settings)
    if services is None:
        return 2
    app = build_application(services)
    log.info(
        "starting: model %s at %s, %d allowed user(s), database %s",
        settings.llm_model,
        settings.openai_base_url,
        len(settings.allowed_user_ids or []),
        settings.database_url,
    )
    if not settings.allowed_user_ids:
        log.warning("ALLOWED_USER_IDS is empty: everyone is refused and told their user id")
    app.run_polling(allowed_updates=Update.ALL_TYPES)
    asyncio.run(services.aclose())
    return 0


def run_chat(settings: Settings) -> int:
    """Chat in the terminal as the owner (or user 0)."""
    from bot.terminal import chat_loop

    services = _build(settings)
    if services is None:
        return 2

    async def go() -> None:
        try:
            await chat_loop(services, settings.owner_id or 0)
        finally:
            await services.aclose()

    asyncio.run(go())
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run."""
    parser = argparse.ArgumentParser(prog="python -m bot", description="A personal assistant in Telegram.")
    parser.add_argument("command", nargs="?", default="run", choices=["run", "chat"])
    args = parser.parse_args(argv)
    settings = _settings()
    if settings is None:
        return 2
    setup_logging(settings.log_level, settings.secrets())
    if args.command == "chat":
        logging.getLogger().setLevel(logging.WARNING)  # keep the terminal for the conversation
        return run_chat(settings)
    missing = settings.missing_for_telegram()
    if missing:
        for line in missing:
            print(line, file=sys.stderr)
        return 2
    return run_bot(settings)


if __name__ == "__main__":
    sys.exit(main())
