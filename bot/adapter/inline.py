"""Inline mode: "@bot question" typed in any chat offers a result that posts the question there, and the
answer is written into that posted message, with the same privacy rule as a guest answer
(core_tools/guest.py), for clients where guest mode is not available.

Telegram wants an inline query answered within seconds and sends one per pause in typing, so the query is
never answered by the LLM: it gets one "ask" article (no LLM request, nothing spent) and a results button
"Continue in private" (/start <token>). The article posts "❓ question" with an "Answer here" button; the
answer starts when the result is chosen (the `chosen_inline_result` update, which @BotFather's
/setinlinefeedback turns on) or when the button is pressed, whichever comes first (the question's token is
used once, db/guest_links.py), and is written into the message by its inline_message_id.
"""

from __future__ import annotations

import contextlib
import logging

from telegram import (
    Bot,
    CallbackQuery,
    ChosenInlineResult,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    InlineQuery,
    InlineQueryResultsButton,
    User,
)
from telegram.error import TelegramError

from bot.adapter.groups import Access
from bot.adapter.guest import (
    CONTINUE,
    OFF,
    USER_REFUSAL,
    InlineMessageSink,
    article,
    continue_markup,
    final_text,
    stop_markup,
)
from bot.runtime.guest import GuestTurns
from core_tools.guest import INLINE
from db.guest_links import INLINE as INLINE_LINK
from db.guest_links import Question

log = logging.getLogger(__name__)

ANSWER_HERE = "Answer here"
ASK_DESCRIPTION = "Posts the question, then the answer, made without your memories, files or chats"
GONE = "That question was answered already, or it is too old: ask again."
MAX_QUESTION = 256  # Telegram's limit of an inline query's text


def asked(question: str) -> str:
    """The head of a posted inline question (and of its answer)."""
    return f"\u2753 {question}\n\n"


class InlineHandlers:
    """Inline queries, their chosen results and the "Answer here" button."""

    def __init__(self, guests: GuestTurns, access: Access, *, enabled: bool, edit_interval_s: float) -> None:
        self.guests = guests
        self.access = access
        self.enabled = enabled
        self.edit_interval_s = edit_interval_s

    async def inline_query(self, bot: Bot, query: InlineQuery) -> None:
        """Offer the "ask" article (or a refusal), at once and without an LLM request."""
        user = query.from_user
        question = query.query.strip()[:MAX_QUESTION]
        button = None
        if not self.enabled:
            results = [article("off", "Inline answers are off", OFF)]
        elif not self.access.serves(user.id, "private", user.id):
            log.info("refused inline query of user %s", user.id)
            results = [article("refused", "Not allowed", USER_REFUSAL.format(user_id=user.id))]
        elif not question:
            results = []
            button = InlineQueryResultsButton(CONTINUE, start_parameter="inline")
        else:
            token = await self.guests.link(user.id, question, INLINE_LINK)
            private = await self.guests.link(user.id, question)
            keyboard = [[InlineKeyboardButton(ANSWER_HERE, callback_data=f"inl:{token}")]]
            more = continue_markup(bot.bot.username, private)
            if more is not None:
                keyboard.extend(list(row) for row in more.inline_keyboard)
            markup = InlineKeyboardMarkup(keyboard)
            title = f"Ask: {question}"
            results = [article(token, title, asked(question).strip(), markup, ASK_DESCRIPTION)]
            button = InlineQueryResultsButton(CONTINUE, start_parameter=private)
        try:
            await bot.answer_inline_query(query.id, results, cache_time=0, is_personal=True, button=button)
        except TelegramError as exc:  # too late (the user typed on), or refused: the next query is answered
            log.info("could not answer inline query: %s", exc)

    async def chosen(self, bot: Bot, result: ChosenInlineResult) -> None:
        """The "ask" article was posted: answer it there."""
        if not self.enabled or result.inline_message_id is None:
            return
        if not self.access.serves(result.from_user.id, "private", result.from_user.id):
            return
        await self.answer_here(bot, result.from_user, result.result_id, result.inline_message_id)

    async def pressed(self, bot: Bot, query: CallbackQuery) -> None:
        """ "Answer here" under a posted question (the gate let only allowed users through)."""
        token = (query.data or "").removeprefix("inl:")
        if not self.enabled or query.inline_message_id is None:
            with contextlib.suppress(TelegramError):
                await query.answer(GONE)
            return
        found = await self.guests.take(token, INLINE_LINK, query.from_user.id)
        with contextlib.suppress(TelegramError):  # at once: the client waits for it, the answer takes long
            await query.answer(None if found is not None else GONE)
        if found is not None:
            await self._answer(bot, query.from_user, found, query.inline_message_id)

    async def answer_here(self, bot: Bot, user: User, token: str, inline_message_id: str) -> bool:
        """Answer the question behind `token` (the user's own, used once) in the posted message; False when
        there is none to answer."""
        found = await self.guests.take(token, INLINE_LINK, user.id)
        if found is None:
            return False
        await self._answer(bot, user, found, inline_message_id)
        return True

    async def _answer(self, bot: Bot, user: User, found: Question, inline_message_id: str) -> None:
        """Write the answer to a posted question into its message."""
        number = self.guests.number()
        head = asked(found.question)
        sink = InlineMessageSink(bot, inline_message_id, head, stop_markup(number), self.edit_interval_s)
        await sink.finish(f"{head}\u23f3 answering\u2026", (), stop_markup(number))
        private = await self.guests.link(user.id, found.question)
        outcome = await self.guests.run(
            number, user.id, found.question, INLINE, sink, first_name=user.first_name, username=user.username
        )
        text, entities = final_text(head, outcome)
        await sink.finish(text, entities, continue_markup(bot.bot.username, private))
