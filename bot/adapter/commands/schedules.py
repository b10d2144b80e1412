"""/reminders and the buttons of reminders: snooze, done, cancel, resume; allowlist and owner checks."""

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
from core_tools.schedule.costs import usd
from core_tools.schedule.rules import ScheduleInputError
from core_tools.schedule.service import ScheduleService
from core_tools.types import ChatType

log = logging.getLogger(__name__)

SNOOZE_MINUTES = {"s10": 10, "s60": 60}
LIST_LIMIT = 30
EMPTY = (
    "You have no reminders or scheduled tasks. Ask me, for example: \u201cremind me tomorrow at 9 to call "
    "the dentist\u201d or \u201cevery weekday at 8 send me the weather\u201d."
)


PAUSE_REASONS = {
    "blocked": "you had blocked me",
    "failures": "it failed 3 times in a row",
    "cost": "a run cost far more than usual",
    "user": "you paused it",
}


def spend_line(item: dict[str, Any]) -> str | None:
    """A task's 'spent this month: $0.0123 of $1.00' (None for a reminder or when it is not known)."""
    spent = item.get("spent_this_month_usd")
    if spent is None:
        return None
    limit = item.get("max_cost_per_month")
    return f"spent this month: {usd(spent)}" + (f" of {usd(limit)}" if limit is not None else "")


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def listing_text(service: ScheduleService, user_id: int, chat_scope: int | None) -> tuple[str, list[Any]]:
    """The /reminders text and the schedules it shows (their ids for the cancel and resume buttons)."""
    items = service.list_for(user_id, chat_scope)
    if not items:
        return EMPTY, []
    lines = ["Your reminders and scheduled tasks:"]
    for item in items[:LIST_LIMIT]:
        label = "task" if item["kind"] == "task" else "reminder"
        when = item.get("snoozed_until") or (item["next"][0] if item["next"] else "no further time")
        line = f"#{item['id']} {label}: {_short(item['text'])}\n   next: {when} ({item['timezone']})"
        if item.get("repeat"):
            line += f"\n   {item['description']}"
        spend = spend_line(item)
        if spend:
            line += f"\n   {spend}"
        if item["status"] == "paused":
            why = PAUSE_REASONS.get(item.get("paused") or "", PAUSE_REASONS["failures"])
            line += f"\n   paused ({why})"
        lines.append(line)
    if len(items) > LIST_LIMIT:
        lines.append(f"... and {len(items) - LIST_LIMIT} more.")
    return "\n".join(lines), items[:LIST_LIMIT]


def snooze_note(service: ScheduleService, user_id: int, firing_id: int, minutes: int) -> str:
    """Snooze a fired reminder; what to tell the user (ScheduleInputError when it is not theirs)."""
    when = service.snooze(user_id, firing_id, minutes)
    return f"Snoozed until {service.local(user_id, when)}."


def cancel_note(service: ScheduleService, user_id: int, schedule_id: int, chat_scope: int | None) -> str:
    """Cancel a schedule; what to tell the user (ScheduleInputError when it is not theirs)."""
    gone = service.cancel(user_id, schedule_id, chat_scope)
    return f"Cancelled #{gone['id']}."


def resume_note(service: ScheduleService, user_id: int, schedule_id: int) -> str:
    """Resume a paused schedule; what to tell the user (ScheduleInputError when it is not theirs)."""
    service.resume(user_id, schedule_id)
    return f"Resumed #{schedule_id}."


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
