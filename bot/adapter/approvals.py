"""Approval prompts in Telegram: the Approve, Deny and Always buttons under a tool call that waits, and the
press that decides it (in whichever process receives it: the decision goes through the database)."""

from __future__ import annotations

import contextlib
import html
import logging
import re
from collections.abc import Callable
from typing import Any, TypeVar

from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, InputFile, Update
from telegram.constants import ParseMode
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
# A press's data, strictly: ASCII digits of an id the approvals table can hold, and a known verb. Anything
# else (a forged or stale button) is answered "no longer open" and goes no further.
_DATA = re.compile(r"apr:([1-9][0-9]{0,9}):([ynas])", re.ASCII)
MAX_ID = 2**31 - 1  # the approvals.id column (Integer)
SHOW_ALL = "s"
# What a press means: the decision stored, whether the person allows the tool from now on, what is shown.
CHOICES = {
    "y": ("approved", False, "Approved"),
    "n": ("denied", False, "Denied"),
    "a": ("approved", True, "Approved for your calls in this chat"),
}
ENDED = {
    "timeout": "No answer in time: not run.",
    "cancelled": "Stopped: not run.",
    "approved": "Approved.",
    "denied": "Denied: not run.",
}
# How much of a call the prompt shows (a message holds 4096 characters); "Show all" sends the rest.
PREVIEW_LINES = 25
PREVIEW_CHARS = 2500


def parse_press(data: str) -> tuple[int, str] | None:
    """The request id and verb of a button's data; None for anything not made by `keyboard`."""
    m = _DATA.fullmatch(data)
    if m is None or int(m.group(1)) > MAX_ID:
        return None
    return int(m.group(1)), m.group(2)


def preview(summary: str) -> tuple[str, int]:
    """The first lines of a call's summary that fit the prompt, and how many lines are left out (a first
    line too long to fit is shown cut, and counts as left out)."""
    lines = summary.split("\n")
    shown: list[str] = []
    size = 0
    for line in lines[:PREVIEW_LINES]:
        if size + len(line) > PREVIEW_CHARS:
            break
        shown.append(line)
        size += len(line) + 1
    if not shown:
        return lines[0][:PREVIEW_CHARS] + "\u2026", len(lines)
    return "\n".join(shown), len(lines) - len(shown)


def prompt_text(request: ApprovalRequest, name: str) -> str:
    """The prompt (HTML): who decides, which tool, and what it will run. Every name and value is escaped
    and the call's arguments are in a code block, so nothing in a call can pass for the prompt's text."""
    shown, more = preview(request.summary)
    text = f"{html.escape(name)}, may I run {html.escape(request.tool)}?\n\n<pre>{html.escape(shown)}</pre>"
    if more:
        lines = f"{more} more line{'s' if more != 1 else ''}"
        text += f"\n\u2026 and {lines}: \u201cShow all\u201d sends the whole call."
    return text


def _always_label(chat_id: int) -> str:
    # In a group the choice is the presser's own (others are still asked): say so.
    return "Always for me in this chat" if chat_id < 0 else "Always in this chat"


def keyboard(request: ApprovalRequest) -> InlineKeyboardMarkup:
    """Approve, Deny, Always (callback data `apr:<id>:<y|n|a|s>`: far under 64 bytes), and "Show all"
    when the prompt shows only the start of the call."""
    rows = [
        [
            InlineKeyboardButton("Approve", callback_data=f"{PREFIX}{request.id}:y"),
            InlineKeyboardButton("Deny", callback_data=f"{PREFIX}{request.id}:n"),
        ],
        [InlineKeyboardButton(_always_label(request.chat_id), callback_data=f"{PREFIX}{request.id}:a")],
    ]
    if preview(request.summary)[1]:
        rows.append([InlineKeyboardButton("Show all", callback_data=f"{PREFIX}{request.id}:{SHOW_ALL}")])
    return InlineKeyboardMarkup(rows)


def _show_all_only(request: ApprovalRequest) -> InlineKeyboardMarkup | None:
    """What stays under a decided prompt: "Show all", when the call was longer than the prompt."""
    if not preview(request.summary)[1]:
        return None
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton("Show all", callback_data=f"{PREFIX}{request.id}:{SHOW_ALL}")]]
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
            reply_markup=keyboard(request),
            parse_mode=ParseMode.HTML,
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
            await bot.edit_message_text(
                f"{text}\n\n{html.escape(ENDED.get(status, status))}",
                place.chat_id,
                message_id,
                parse_mode=ParseMode.HTML,
                reply_markup=_show_all_only(request),
            )
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
        press = parse_press(query.data or "")
        row = await self._db(lambda: self.store.get(press[0])) if press is not None else None
        if press is None or row is None or not await self._under_prompt(query, row.chat_id):
            await _answer(query.answer("This request is no longer open."))
            return
        choice = press[1]
        request = ApprovalRequest(row.id, row.chat_id, row.user_id, row.tool, row.summary)
        if choice == SHOW_ALL:  # anyone who sees the prompt may read the whole call
            await self._show_all(query, request)
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
        text = prompt_text(request, await self._db(lambda: self.store.name_of(row.user_id)))
        by = html.escape(user.first_name or f"user {user.id}")
        with contextlib.suppress(TelegramError):
            await query.edit_message_text(
                f"{text}\n\n{shown} by {by}.",
                parse_mode=ParseMode.HTML,
                reply_markup=_show_all_only(request),
            )

    async def _under_prompt(self, query: Any, chat_id: int) -> bool:
        """Whether the press came from the chat the request was asked in (a forged id of another chat's
        request does not reach it); a press whose message Telegram no longer gives is let through."""
        message = query.message
        if message is None:
            return True
        try:
            place = await self._db(lambda: self.topics.place(chat_id))
        except LookupError:
            return False
        return bool(message.chat.id == place.chat_id)

    async def _show_all(self, query: Any, request: ApprovalRequest) -> None:
        """The whole call, as a text file in the chat (or topic): a program of any length, unshortened."""
        place = self.topics.place(request.chat_id)
        body = f"{request.tool}\n\n{request.summary}\n".encode()
        try:
            await self.bot.send_document(
                place.chat_id,
                InputFile(body, filename=f"call-{request.id}-{request.tool[:40]}.txt"),
                caption=f"The whole call of {request.tool} (request {request.id}).",
                message_thread_id=place.thread_id,
            )
        except TelegramError as exc:
            log.info("could not send the whole call of approval %d: %s", request.id, exc)
            await _answer(query.answer("The whole call could not be sent; please try again."))
            return
        await _answer(query.answer("Sent the whole call."))


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
