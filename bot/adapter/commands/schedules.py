"""/reminders and the buttons of reminders in Telegram: snooze, done, cancel, resume; allowlist and owner
checks (bot/texts/schedules.py words the replies)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from telegram import InlineKeyboardButton, InlineKeyboardMarkup, Update
from telegram.error import TelegramError
from telegram.ext import (
    Application,
    ApplicationHandlerStop,
    CallbackQueryHandler,
    CommandHandler,
    TypeHandler,
)

from bot.adapter.context import Ctx
from bot.adapter.topics import conversation_of
from bot.runtime.schedule_jobs import ScheduleRunner
from bot.runtime.services import Services
from bot.texts.schedules import cancel_note, listing_text, resume_note, snooze_note
from core_tools.schedule.rules import ScheduleInputError
from core_tools.schedule.service import ScheduleService
from core_tools.types import ChatType

log = logging.getLogger(__name__)

SNOOZE_MINUTES = {"s10": 10, "s60": 60}


class ScheduleCommands:
    """The chat side of schedules."""

    def __init__(self, services: Services, runner: ScheduleRunner) -> None:
        self.service: ScheduleService = services.schedules.service
        self.runner = runner
        self.allowed = set(services.settings.allowed_user_ids or [])
        self.topics = services.conversations.topics

    def listing(self, user_id: int, chat_scope: int | None) -> tuple[str, InlineKeyboardMarkup | None]:
        """The /reminders text and its buttons (a cancel button each; resume for paused ones)."""
        text, items = listing_text(self.service, user_id, chat_scope)
        if not items:
            return text, None
        buttons = []
        for item in items:
            if item["status"] == "paused":
                buttons.append(
                    [InlineKeyboardButton(f"Resume #{item['id']}", callback_data=f"sch:resume:{item['id']}")]
                )
            buttons.append(
                [InlineKeyboardButton(f"Cancel #{item['id']}", callback_data=f"sch:cancel:{item['id']}")]
            )
        return text, InlineKeyboardMarkup(buttons)

    def _scope(self, update: Update) -> int | None:
        chat = update.effective_chat
        assert chat is not None
        # In a group only that group's schedules are shown (in a forum topic: that topic's), private
        # reminders stay private.
        if chat.type == ChatType.PRIVATE:
            return None
        return conversation_of(self.topics, update)

    async def reminders(self, update: Update, context: Ctx) -> None:
        """/reminders."""
        assert update.effective_message and update.effective_user
        # The listing works out each schedule's next times: in a worker thread, off the event loop.
        text, markup = await asyncio.to_thread(self.listing, update.effective_user.id, self._scope(update))
        await update.effective_message.reply_text(text, reply_markup=markup)

    async def gate(self, update: object, context: Ctx) -> None:
        """A reminder button pressed by someone not on the allowlist is answered and goes no further (other
        buttons, such as Stop in a group chat, have their own checks)."""
        if not isinstance(update, Update) or update.callback_query is None:
            return
        query = update.callback_query
        if not (query.data or "").startswith("sch:"):
            return
        if query.from_user is not None and query.from_user.id in self.allowed:
            return
        try:
            await query.answer("Sorry, this is a private assistant.", show_alert=True)
        except TelegramError as exc:
            log.info("could not answer a refused callback query: %s", exc)
        raise ApplicationHandlerStop

    async def button(self, update: Update, context: Ctx) -> None:
        """Snooze, done, cancel, resume; only the owner of the schedule may press them."""
        query = update.callback_query
        assert query is not None and query.from_user is not None
        user_id = query.from_user.id
        _, action, raw_id = (
            (query.data or "").split(":", 2) if (query.data or "").count(":") == 2 else ("", "", "")
        )
        if not raw_id.isdigit():
            await query.answer("This button is not known any more.")
            return
        item_id = int(raw_id)
        try:
            if action in SNOOZE_MINUTES:
                note = await asyncio.to_thread(
                    snooze_note, self.service, user_id, item_id, SNOOZE_MINUTES[action]
                )
                self.runner.wake()
                await query.answer(note)
                await self._replace_buttons(query, f"💤 {note}")
            elif action == "done":
                await asyncio.to_thread(self.service.done, user_id, item_id)
                await query.answer("Done.")
                await self._replace_buttons(query, "✅ Done.")
            elif action == "cancel":
                scope = None if update.effective_chat is None else self._scope(update)
                note = await asyncio.to_thread(cancel_note, self.service, user_id, item_id, scope)
                await query.answer(note)
                await self._refresh_listing(query, user_id, scope)
            elif action == "resume":
                note = await asyncio.to_thread(resume_note, self.service, user_id, item_id)
                self.runner.wake()
                await query.answer(note)
                scope = None if update.effective_chat is None else self._scope(update)
                await self._refresh_listing(query, user_id, scope)
            else:
                await query.answer("This button is not known any more.")
        except ScheduleInputError as exc:
            # Not the user's, or already handled: say so, change nothing.
            await query.answer(str(exc), show_alert=True)

    @staticmethod
    async def _replace_buttons(query: Any, note: str) -> None:
        message = query.message
        if message is None or not getattr(message, "text", None):
            return
        try:
            await query.edit_message_text(f"{message.text}\n\n{note}")
        except TelegramError as exc:
            log.info("could not update a reminder message: %s", exc)

    async def _refresh_listing(self, query: Any, user_id: int, scope: int | None) -> None:
        text, markup = await asyncio.to_thread(self.listing, user_id, scope)
        try:
            await query.edit_message_text(text, reply_markup=markup)
        except TelegramError as exc:
            log.info("could not refresh /reminders: %s", exc)


def register_schedule_handlers(
    app: Application[Any, Any, Any, Any, Any, Any], services: Services, runner: ScheduleRunner
) -> None:
    """Add /reminders and the button handlers of `runner` (the tool's wake-up goes to it; its periodic
    jobs are registered with the others, bot/runtime/jobs.py)."""
    commands = ScheduleCommands(services, runner)
    # Before the global allowlist gate (group -1), so a refused button press is still answered.
    app.add_handler(TypeHandler(Update, commands.gate), group=-2)
    app.add_handler(CommandHandler("reminders", commands.reminders))
    app.add_handler(CallbackQueryHandler(commands.button, pattern=r"^sch:"))
