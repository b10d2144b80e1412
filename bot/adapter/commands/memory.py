"""/memory and /timezone in Telegram; bot/texts/memory.py words the replies."""

from __future__ import annotations

import asyncio
import logging

from telegram import Update

from bot.adapter.context import Ctx
from bot.runtime.services import Services
from bot.texts.memory import memory_reply, timezone_reply
from core_tools.types import ChatType

log = logging.getLogger(__name__)


class MemoryCommands:
    """Handlers that show and change a user's memories and time zone."""

    def __init__(self, services: Services) -> None:
        self.services = services

    async def memory(self, update: Update, context: Ctx) -> None:
        """/memory, /memory search TEXT, /memory forget ID."""
        assert update.effective_message and update.effective_user and update.effective_chat
        chat = update.effective_chat
        private = chat.type == ChatType.PRIVATE
        reply = await memory_reply(
            self.services, update.effective_user.id, chat.id, private, context.args or []
        )
        await update.effective_message.reply_text(reply)

    async def timezone(self, update: Update, context: Ctx) -> None:
        """/timezone [Area/City]."""
        assert update.effective_message and update.effective_user
        user = update.effective_user
        # Off the event loop: the user's schedules move with the zone (their next times are worked out).
        reply = await asyncio.to_thread(
            timezone_reply, self.services, user.id, user.first_name, user.username, context.args or []
        )
        self.services.schedules.wake()  # a moved firing may be due sooner than the armed look
        await update.effective_message.reply_text(reply)
