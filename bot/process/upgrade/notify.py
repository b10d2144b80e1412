"""Telling the owner in Telegram what an upgrade did: best effort, one short line, never a secret."""

from __future__ import annotations

import asyncio
import logging

from bot.config.settings import Settings
from bot.process.logs import Redactor
from bot.process.upgrade.sync import run_sync

log = logging.getLogger(__name__)
SEND_TIMEOUT_S = 20.0


def tell_owner(settings: Settings, line: str) -> bool:
    """Send `line` to OWNER_USER_ID through the Bot API when a token is set; whether it was sent."""
    owner, token = settings.owner_id, settings.telegram_bot_token
    if owner is None or token is None:
        return False
    from telegram import Bot

    text = Redactor(settings.secrets()).mask(line)[:1000]

    async def send() -> None:
        bot = Bot(token.get_secret_value(), base_url=settings.telegram_api_base_url)
        async with bot:
            await bot.send_message(owner, text)

    try:
        run_sync(lambda: asyncio.wait_for(send(), SEND_TIMEOUT_S))
    except Exception as exc:  # no network, a bad token: the operator has the line on the terminal
        log.warning("could not tell the owner about the upgrade (%s)", type(exc).__name__)
        return False
    return True
