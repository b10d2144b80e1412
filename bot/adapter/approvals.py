"""Approval prompts in Telegram: the Approve, Deny and Always buttons under a tool call that waits, and the
press that decides it (in whichever process receives it: the decision goes through the database)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, Update
from telegram.error import TelegramError
from telegram.ext import Application, CallbackQueryHandler, ContextTypes

from core_tools.aio import settled
from core_tools.approval import ApprovalGate, ApprovalRequest
from db.approvals import PENDING, Approvals
from db.topics import Topics

log = logging.getLogger(__name__)

T = TypeVar("T")

Ctx = ContextTypes.DEFAULT_TYPE
PREFIX = "apr:"
# What a press means: the decision stored, whether the chat allows the tool from now on, what is shown.
CHOICES = {
    "y": ("approved", False, "Approved"),
    "n": ("denied", False, "Denied"),
    "a": ("approved", True, "Approved for this chat"),
}
ENDED = {
    "timeout": "No answer in time: not run.",
    "cancelled": "Stopped: not run.",
    "approved": "Approved.",
    "denied": "Denied: not run.",
}


def prompt_text(request: ApprovalRequest, name: str) -> str:
    """The prompt: who decides, which tool, its arguments (already bounded and masked)."""
    return f"{name}, may I run {request.tool}?\n\n{request.summary}"


def keyboard(approval_id: int) -> InlineKeyboardMarkup:
    """Approve, Deny, Always in this chat (callback data `apr:<id>:<y|n|a>`: far under 64 bytes)."""
    return InlineKeyboardMarkup(
        [
            [
                InlineKeyboardButton("Approve", callback_data=f"{PREFIX}{approval_id}:y"),
                InlineKeyboardButton("Deny", callback_data=f"{PREFIX}{approval_id}:n"),
            ],
            [InlineKeyboardButton("Always in this chat", callback_data=f"{PREFIX}{approval_id}:a")],
        ]
    )


class TelegramApprovals:
    """The front end of core_tools.approval: asks in the chat, and handles the buttons' presses."""

    def __init__(self, store: Approvals, topics: Topics, bot: Bot) -> None:
        self.store = store
        self.topics = topics
        self.bot = bot

    async def _db(self, call: Callable[[], T]) -> T:
        return await settled(call, off_loop=self.store.over_network)

    async def ask(self, request: ApprovalRequest) -> int | None:
        """Show the request with its buttons in the chat (or forum topic) of the turn."""
        bot = self.bot
        place = self.topics.place(request.chat_id)
        sent = await bot.send_message(
            place.chat_id,
            prompt_text(request, await self._db(lambda: self.store.name_of(request.user_id))),
            message_thread_id=place.thread_id,
            reply_markup=keyboard(request.id),
        )
        return sent.message_id

    async def settled(self, request: ApprovalRequest, message_id: int | None, status: str) -> None:
        """Take the buttons away from a request that ended without a press, saying how it ended."""
        bot = self.bot
        if message_id is None:
            return
        place = self.topics.place(request.chat_id)
        text = prompt_text(request, await self._db(lambda: self.store.name_of(request.user_id)))
        try:
            await bot.edit_message_text(f"{text}\n\n{ENDED.get(status, status)}", place.chat_id, message_id)
        except TelegramError as exc:
            log.info("could not update approval prompt %d: %s", request.id, exc)

    async def tell(self, chat_id: int, text: str) -> None:
        """A plain message to the chat (or forum topic)."""
        bot = self.bot
        place = self.topics.place(chat_id)
        await bot.send_message(place.chat_id, text, message_thread_id=place.thread_id)

    async def pressed(self, update: Update, context: Ctx) -> None:
        """Approve, Deny or Always: only the person whose turn it is decides, once."""
        query, user = update.callback_query, update.effective_user
        assert query and user
        head, _, choice = (query.data or "").removeprefix(PREFIX).partition(":")
        row = await self._db(lambda: self.store.get(int(head))) if head.isdigit() else None
        if row is None or choice not in CHOICES:
            await _answer(query.answer("This request is no longer open."))
            return
        if user.id != row.user_id:
            name = await self._db(lambda: self.store.name_of(row.user_id))
            await _answer(query.answer(f"Only {name} can decide."))
            return
        status, always, shown = CHOICES[choice]
        if row.status != PENDING or not await self._db(
            lambda: self.store.decide(row.id, status, user.id, always=always)
        ):
            await _answer(query.answer("This request is no longer open."))
            return
        log.info(
            "approval %d (%s in chat %s): %s%s by user %s",
            row.id,
            row.tool,
            row.chat_id,
            status,
            " always in this chat" if always else "",
            user.id,
        )
        await _answer(query.answer(f"{shown}."))
        request = ApprovalRequest(row.id, row.chat_id, row.user_id, row.tool, row.summary)
        text = prompt_text(request, await self._db(lambda: self.store.name_of(row.user_id)))
        by = user.first_name or f"user {user.id}"
        with contextlib.suppress(TelegramError):
            await query.edit_message_text(f"{text}\n\n{shown} by {by}.")


async def _answer(call: Any) -> None:
    try:
        await call
    except TelegramError as exc:
        log.debug("answerCallbackQuery failed: %s", exc)


def register_approval_handlers(
    app: Application[Any, Any, Any, Any, Any, Any], approvals: ApprovalGate | None, topics: Topics
) -> None:
    """The approval buttons' handler; the gate (services.approvals) asks through Telegram from now on."""
    if approvals is None:
        return
    front = TelegramApprovals(approvals.store, topics, app.bot)
    approvals.asker = front
    app.add_handler(CallbackQueryHandler(front.pressed, pattern=rf"^{PREFIX}"))
