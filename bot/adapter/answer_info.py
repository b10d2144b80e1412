"""The ⓘ button under an answer: "why this answer" (issue 23 section 5).

A press sends a small note as a reply to the answer (the answer itself stays as it is): the memories that
were recalled into the turn (into its prompt, or by the memory tool), each with a Forget button (the same
service as /memory forget), the tools it called with their arguments, the model, LLM requests, tokens, cost
and time. The record is the turn's row of db/turn_info.py, stored with the answer and deleted with the
turn's messages.

Only the person who asked may open it or forget from it ("only X can see this" for anyone else), and only
in the conversation the answer is in. Callback data: `ai:<answer id>` and `aif:<answer id>:<memory
number>`, well under Telegram's 64 bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any

from telegram import InlineKeyboardButton, InlineKeyboardMarkup, ReplyParameters, Update
from telegram.error import TelegramError
from telegram.ext import CallbackQueryHandler

from bot.adapter.context import Ctx
from bot.adapter.topics import conversation_of, place_of
from core_tools.memory.store import MemoryStore
from core_tools.types import ChatType
from core_tools.usage.amounts import fine_usd, tokens_str
from db.topics import Topics
from db.turn_info import StoredTurnInfo, TurnInfos

log = logging.getLogger(__name__)

INFO_BUTTON = "ⓘ"
INFO_DATA = "ai:"
FORGET_DATA = "aif:"
GONE = "The details of this answer are gone: its messages were deleted."
NOT_YOURS = "Only {name} can see this."
NOTE_LIMIT = 3800  # characters of the note (Telegram's limit is 4096)
FORGET_PER_ROW = 4


def shown_in(setting: str, chat_kind: str) -> bool:
    """Whether an answer in a chat of this kind carries the ⓘ button (ANSWER_INFO_BUTTON)."""
    if setting == "all":
        return True
    return setting == "private" and chat_kind == ChatType.PRIVATE


def info_markup(answer_id: int) -> InlineKeyboardMarkup:
    """The ⓘ button under an answer."""
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton(INFO_BUTTON, callback_data=f"{INFO_DATA}{answer_id}")]]
    )


def _arguments(raw: str) -> str:
    """A tool call's arguments, compact (as the model wrote them when they are not JSON)."""
    try:
        return json.dumps(json.loads(raw), ensure_ascii=False, separators=(", ", ": "))
    except (json.JSONDecodeError, ValueError):
        return raw


def _seconds(ms: int) -> str:
    return f"{ms / 1000:.1f} s" if ms < 60_000 else f"{ms // 60_000} min {ms % 60_000 // 1000} s"


def info_text(info: StoredTurnInfo, kept: set[str]) -> str:
    """The note: memories recalled (those forgotten since marked), tools called, model, tokens, cost."""
    r = info.record
    requests = f"{r.api_calls} LLM request" + ("s" if r.api_calls != 1 else "")
    lines = ["Why this answer", f"Model: {r.model} · {requests} · {_seconds(r.duration_ms)}"]
    tokens = f"Tokens: {tokens_str(r.prompt_tokens)} in"
    if r.cached_tokens:
        tokens += f" ({tokens_str(r.cached_tokens)} cached)"
    tokens += f", {tokens_str(r.completion_tokens)} out"
    if r.tokens_estimated:
        tokens += " (estimated)"
    cost = "unknown (no price for this model)" if r.cost_usd is None else fine_usd(r.cost_usd)
    lines += [tokens, f"Cost: {cost}"]
    if r.memories:
        lines += ["", "Memories recalled into it:"]
        for n, m in enumerate(r.memories, 1):
            mark = "" if m.id in kept else " (forgotten)"
            lines.append(f"{n}. {m.content}{mark}")
    else:
        lines += ["", "No memories were recalled into it."]
    if r.tools:
        lines += ["", "Tools called:"]
        lines += [f"• {t.name} {_arguments(t.arguments)}" + ("" if t.ok else " (failed)") for t in r.tools]
    else:
        lines += ["", "No tools were called."]
    text = "\n".join(lines)
    return text if len(text) <= NOTE_LIMIT else text[: NOTE_LIMIT - 1] + "…"


def forget_markup(info: StoredTurnInfo, kept: set[str]) -> InlineKeyboardMarkup | None:
    """A Forget button for each recalled memory still kept."""
    buttons = [
        InlineKeyboardButton(f"Forget {n}", callback_data=f"{FORGET_DATA}{info.answer_id}:{n}")
        for n, m in enumerate(info.record.memories, 1)
        if m.id in kept
    ]
    if not buttons:
        return None
    rows = [buttons[i : i + FORGET_PER_ROW] for i in range(0, len(buttons), FORGET_PER_ROW)]
    return InlineKeyboardMarkup(rows)


class AnswerInfo:
    """The handlers of the ⓘ button and of the Forget buttons of its note."""

    def __init__(self, infos: TurnInfos, memory: MemoryStore, topics: Topics) -> None:
        self.infos = infos
        self.memory = memory
        self.topics = topics

    async def _load(self, update: Update, answer_id: int) -> StoredTurnInfo | None:
        """The record the press is about, when the presser may see it; else the press is answered (gone,
        or not theirs) and None returned."""
        query, user = update.callback_query, update.effective_user
        assert query is not None and user is not None
        info = await asyncio.to_thread(self.infos.for_answer, answer_id)
        # A record of another conversation (a forged button) is as good as gone here: never shown.
        if info is None or info.record.chat_id != conversation_of(self.topics, update):
            await _answer(query, GONE, alert=True)
            return None
        if info.record.user_id != user.id:
            name = info.first_name or "the person who asked"
            await _answer(query, NOT_YOURS.format(name=name), alert=True)
            return None
        return info

    async def _kept(self, info: StoredTurnInfo) -> set[str]:
        ids = [m.id for m in info.record.memories]
        return await self.memory.still_kept(info.record.user_id, ids)

    async def pressed(self, update: Update, context: Ctx) -> None:
        """ⓘ: send the note as a reply to the answer."""
        query = update.callback_query
        assert query is not None
        raw = (query.data or "").removeprefix(INFO_DATA)
        info = await self._load(update, int(raw)) if raw.isdigit() else None
        if info is None:
            if not raw.isdigit():
                await _answer(query, GONE, alert=True)
            return
        kept = await self._kept(info)
        place = place_of(update)
        answer_msg = query.message.message_id if query.message is not None else None
        try:
            await context.bot.send_message(
                place.chat_id,
                info_text(info, kept),
                reply_parameters=ReplyParameters(answer_msg, allow_sending_without_reply=True)
                if answer_msg is not None
                else None,
                message_thread_id=place.thread_id,
                reply_markup=forget_markup(info, kept),
            )
        except TelegramError as exc:
            log.warning("could not send the details of answer %s: %s", info.answer_id, exc)
            await _answer(query, "Sorry, I could not send the details; please try again.")
            return
        await _answer(query, None)

    async def forget_pressed(self, update: Update, context: Ctx) -> None:
        """Forget N under the note: forget that memory (as /memory forget does) and update the note."""
        query = update.callback_query
        assert query is not None
        parts = (query.data or "").removeprefix(FORGET_DATA).split(":")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            await _answer(query, GONE, alert=True)
            return
        info = await self._load(update, int(parts[0]))
        if info is None:
            return
        number = int(parts[1])
        memories = info.record.memories
        if not 1 <= number <= len(memories):
            await _answer(query, "That memory is not in this answer's details.")
            return
        gone = await self.memory.forget(info.record.user_id, memories[number - 1].id)
        note = "Forgotten. (/memory undo brings it back.)" if gone else "That memory was already forgotten."
        await _answer(query, note)
        kept = await self._kept(info)
        try:
            await query.edit_message_text(info_text(info, kept), reply_markup=forget_markup(info, kept))
        except TelegramError as exc:  # "not modified" when it was already shown forgotten
            log.info("could not update the details of answer %s: %s", info.answer_id, exc)


async def _answer(query: Any, text: str | None, *, alert: bool = False) -> None:
    with contextlib.suppress(TelegramError):
        await query.answer(text, show_alert=alert)


def register_answer_info(app: Any, infos: TurnInfos, memory: MemoryStore, topics: Topics) -> None:
    """Add the handlers of the ⓘ button and its note's Forget buttons."""
    handlers = AnswerInfo(infos, memory, topics)
    app.add_handler(CallbackQueryHandler(handlers.pressed, pattern=rf"^{INFO_DATA}"))
    app.add_handler(CallbackQueryHandler(handlers.forget_pressed, pattern=rf"^{FORGET_DATA}"))
