"""/checkin and the buttons under a check-in in Telegram (bot/texts/checkin.py words them; the check-ins
themselves: core_tools/checkin/, bot/runtime/checkin_jobs.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from telegram import Update
from telegram.error import TelegramError
from telegram.ext import Application, CallbackQueryHandler, CommandHandler

from bot.adapter.context import Ctx
from bot.adapter.outbox import keyboard
from bot.runtime.services import Services
from bot.texts.checkin import rendered, set_text, state_text
from core_tools.checkin.rules import CheckinInputError, parse
from core_tools.checkin.service import CheckinService
from core_tools.types import ChatType

log = logging.getLogger(__name__)

ACTIONS = ("still", "done", "drop", "undo", "snz")
PRIVATE_ONLY = "Check-ins are private: use /checkin in a private chat with me."


class CheckinCommands:
    """The chat side of check-ins."""

    def __init__(self, services: Services, service: CheckinService) -> None:
        self.services = services
        self.service = service

    async def checkin(self, update: Update, context: Ctx) -> None:
        """/checkin, /checkin daily HH:MM [digest], /checkin weekly DAY HH:MM [digest], /checkin off."""
        msg, user, chat = update.effective_message, update.effective_user, update.effective_chat
        assert msg and user and chat
        if chat.type != ChatType.PRIVATE:  # groups never get check-ins, nor see anyone's
            await msg.reply_text(PRIVATE_ONLY)
            return
        try:
            req = parse(context.args or [])
        except CheckinInputError as exc:
            await msg.reply_text(str(exc))
            return
        if req.action == "off":
            was_on = await asyncio.to_thread(self.service.off, user.id)
            await msg.reply_text("Check-ins are off." if was_on else "Check-ins were not on.")
            return
        if req.action == "set":
            await asyncio.to_thread(self.service.set, user.id, req)
            self.services.schedules.wake()  # the runner arms for its first time
            state = await asyncio.to_thread(self.service.state, user.id)
            await msg.reply_text(set_text(state))
            return
        state = await asyncio.to_thread(self.service.state, user.id)
        await msg.reply_text(state_text(state))

    async def pressed(self, update: Update, context: Ctx) -> None:
        """Still on, Done, Drop, Undo drop, Snooze under a check-in; each acts on the presser's own rows."""
        query = update.callback_query
        assert query is not None and query.from_user is not None
        parts = (query.data or "").split(":", 2)
        if len(parts) != 3 or parts[1] not in ACTIONS or not parts[2]:
            await _answer(query, "This button is not known any more.")
            return
        user_id = query.from_user.id
        try:
            note, row = await self.service.press(user_id, parts[1], parts[2])
        except CheckinInputError as exc:
            await _answer(query, str(exc), alert=True)
            return
        if parts[1] == "snz":
            self.services.schedules.wake()
        await _answer(query, note)
        message = query.message
        if row is None or message is None or row.last_message_id != message.message_id or not row.last_items:
            return  # an older check-in: the memory changed, its message stays as it was
        text, buttons = rendered(row.last_items)
        try:
            await query.edit_message_text(text, reply_markup=keyboard(buttons))
        except TelegramError as exc:
            log.info("could not update a check-in message: %s", exc)


async def _answer(query: Any, text: str | None, *, alert: bool = False) -> None:
    with contextlib.suppress(TelegramError):
        await query.answer(text, show_alert=alert)


def register_checkin_handlers(app: Application[Any, Any, Any, Any, Any, Any], services: Services) -> None:
    """Add /checkin and the check-in buttons (when the services have check-ins)."""
    if services.checkins is None:
        return
    commands = CheckinCommands(services, services.checkins)
    app.add_handler(CommandHandler("checkin", commands.checkin))
    app.add_handler(CallbackQueryHandler(commands.pressed, pattern=r"^ci:"))
