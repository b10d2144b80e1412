"""Guest mode (Bot API 10.0): a user mentions the bot in any chat, even one it is not in, and the bot answers
there as a guest (`answerGuestQuery`), without the user's private data (core_tools/guest.py).

The update is `guest_message`: a Message whose `guest_query_id` is answered once with one inline result.
The answer is first a short "answering..." with a Stop button, then edited (by its inline_message_id) as
the turn streams, and finally into the answer, one line saying it was made without the user's private data,
and a "continue in private" button: a deep link t.me/<bot>?start=<token> whose question waits in the
database (db/guest_links.py), so /start <token> in the private chat asks it there as a normal turn.

A bot supports guest queries when its owner turns guest mode on in @BotFather (getMe then says
`supports_guest_queries`): no Bot API method sets it, so at start the bot logs what is missing. Someone not
allowed gets the private chat's refusal as the answer, and no LLM request is made; with GUEST_MODE=off every
guest query is answered with one line saying so.

Guest and inline updates are handled before the gate (bot/adapter/app.py `Handlers.gate` knows only chats);
inline queries are bot/adapter/inline.py's. The API's facts relied on: docs/design-notes.md, "Guest and inline
mode".
"""

from __future__ import annotations

import asyncio
import logging
import re
import time

from telegram import (
    Bot,
    InlineKeyboardButton,
    InlineKeyboardMarkup,
    InlineQueryResultArticle,
    InputTextMessageContent,
    Message,
    MessageEntity,
    User,
)
from telegram.error import BadRequest, RetryAfter, TelegramError

from bot.adapter.groups import Access, quoted_context
from bot.adapter.render import TELEGRAM_LIMIT, render, utf16_len
from bot.runtime.guest import GuestOutcome, GuestTurns
from core_tools.guest import GUEST

log = logging.getLogger(__name__)

# The private chat's refusal too (bot/adapter/app.py): the same words wherever someone not allowed asks.
USER_REFUSAL = (
    "Sorry, this is a private assistant and you are not on its list of allowed users.\n"
    "Your Telegram user id is {user_id}. If you run this bot, add it to ALLOWED_USER_IDS."
)
OFF = "I do not answer as a guest: guest mode is off for this bot (GUEST_MODE)."
EMPTY = "Ask me something after my name, for example: @{name} what is 15% of 240?"
ANSWERING = "\u23f3 answering\u2026"
STOPPED = "(stopped)"
# The one line every guest or inline answer carries.
PRIVACY_LINE = "Answered as a guest: without your memories, files or earlier conversation."
CUT_NOTE = "\u2026 (cut: continue in private for the whole answer)"
CONTINUE = "Continue in private"
STOP = "Stop"
MIN_EDIT_INTERVAL_S = 3.0  # an answer posted into a group: Telegram allows about 20 edits a minute there


def support_line(me: User, enabled: bool) -> str | None:
    """What the start-up log says when GUEST_MODE=on but @BotFather's guest mode is not (getMe's
    `supports_guest_queries`): no Bot API method turns it on."""
    if not enabled or me.supports_guest_queries:
        return None
    inline = "" if me.supports_inline_queries else "; inline queries also need /setinline there"
    return (
        "GUEST_MODE=on, but Telegram says this bot does not support guest queries: turn on Guest Mode in "
        f"@BotFather (Bot Settings) to be answerable from any chat{inline}"
    )


def article(
    result_id: str,
    title: str,
    text: str,
    markup: InlineKeyboardMarkup | None = None,
    description: str | None = None,
) -> InlineQueryResultArticle:
    """One text result (what an inline or guest answer posts)."""
    return InlineQueryResultArticle(
        result_id,
        title[:64] or "Answer",
        InputTextMessageContent(text[:TELEGRAM_LIMIT]),
        reply_markup=markup,
        description=description,
    )


def stop_markup(number: int) -> InlineKeyboardMarkup:
    """The Stop button of guest (or inline) turn `number`."""
    return InlineKeyboardMarkup([[InlineKeyboardButton(STOP, callback_data=f"gstop:{number}")]])


def continue_markup(bot_username: str | None, token: str) -> InlineKeyboardMarkup | None:
    """The "continue in private" button: the private chat, /start <token> (None when the bot has no name)."""
    if not bot_username:
        return None
    url = f"https://t.me/{bot_username}?start={token}"
    return InlineKeyboardMarkup([[InlineKeyboardButton(CONTINUE, url=url)]])


def question_of(msg: Message, bot: User) -> str:
    """What a guest message asks: its text without the bot's @name, after the message it replies to."""
    text = msg.text or msg.caption or ""
    if bot.username:
        text = re.sub(rf"@{re.escape(bot.username)}\b", " ", text, flags=re.IGNORECASE)
    text = re.sub(r"[ \t]{2,}", " ", text).strip()
    if not text:
        return ""
    quoted = quoted_context(msg, bot)
    return f"{quoted}\n\n{text}" if quoted else text


def final_text(head: str, outcome: GuestOutcome) -> tuple[str, tuple[MessageEntity, ...]]:
    """The posted answer: `head` (the question, for an inline result), the answer rendered (cut to one
    message), and the privacy line."""
    tail = f"\n\n{PRIVACY_LINE}"
    entities: tuple[MessageEntity, ...] = ()
    if outcome.status == "failed":
        body = outcome.text
    else:
        answer = outcome.text or ("" if outcome.status == "stopped" else "(I have no answer to that.)")
        parts = render(answer) if answer else []
        body, entities = (parts[0].text, parts[0].entities) if parts else (answer, ())
        if len(parts) > 1:
            body = f"{body}\n{CUT_NOTE}"
        if outcome.status == "stopped":
            body = f"{body}\n\n{STOPPED}" if body else STOPPED
    shift = utf16_len(head)
    room = TELEGRAM_LIMIT - shift - utf16_len(tail) - utf16_len(CUT_NOTE) - 2
    if utf16_len(body) > room:  # the rendered text is cut as plain text: no entity may cross the cut
        body, entities = body[: max(0, room)] + "\n" + CUT_NOTE, ()
    if shift:
        entities = tuple(
            MessageEntity(e.type, e.offset + shift, e.length, url=e.url, language=e.language)
            for e in entities
        )
    return f"{head}{body}{tail}", entities


class InlineMessageSink:
    """A guest turn's progress, shown by editing the posted inline message (a guest answer, an inline
    result): throttled, only when the text changed, pausing on 429; the final text is `finish`'s."""

    def __init__(
        self, bot: Bot, inline_message_id: str, head: str, markup: InlineKeyboardMarkup, interval_s: float
    ) -> None:
        self.bot = bot
        self.inline_message_id = inline_message_id
        self.head = head  # shown above the answer (an inline result's question)
        self.markup = markup
        self.interval_s = max(interval_s, MIN_EDIT_INTERVAL_S)
        self._last_at = time.monotonic()
        self._shown = ""
        self._paused_until = 0.0

    async def text(self, partial: str) -> None:
        """The answer so far."""
        await self._show(partial.strip()[: TELEGRAM_LIMIT - 200] + " \u2026")

    async def status(self, line: str) -> None:
        """A status line such as "running code...", under what was written so far."""
        await self._show(f"{ANSWERING}\n{line}")

    async def _show(self, body: str) -> None:
        now = time.monotonic()
        if now - self._last_at < self.interval_s or now < self._paused_until or body == self._shown:
            return
        self._last_at = now
        await self._edit(f"{self.head}{body}", (), self.markup)
        self._shown = body

    async def _edit(
        self, text: str, entities: tuple[MessageEntity, ...], markup: InlineKeyboardMarkup | None
    ) -> bool:
        try:
            await self.bot.edit_message_text(
                text, inline_message_id=self.inline_message_id, entities=entities or None, reply_markup=markup
            )
        except RetryAfter as exc:
            ra = exc.retry_after
            self._paused_until = time.monotonic() + (
                ra if isinstance(ra, int | float) else ra.total_seconds()
            )
            return False
        except BadRequest as exc:
            if "not modified" in str(exc).lower():
                return True  # it shows this already
            log.warning("could not edit guest answer: %s", exc)
            return False
        except TelegramError as exc:
            log.warning("could not edit guest answer: %s", exc)
            return False
        return True

    async def finish(
        self, text: str, entities: tuple[MessageEntity, ...], markup: InlineKeyboardMarkup | None
    ) -> None:
        """Show the final text: retried after a 429, once plain if the entities are refused."""
        for _ in range(3):
            wait = self._paused_until - time.monotonic()
            if wait > 0:
                await asyncio.sleep(min(wait, 30.0))
            if await self._edit(text, entities, markup):
                return
            if self._paused_until <= time.monotonic():
                entities = ()  # refused: plain text the second time


class GuestHandlers:
    """The `guest_message` update: refuse, or answer as a guest turn."""

    def __init__(self, guests: GuestTurns, access: Access, *, enabled: bool, edit_interval_s: float) -> None:
        self.guests = guests
        self.access = access
        self.enabled = enabled
        self.edit_interval_s = edit_interval_s

    async def guest_message(self, bot: Bot, msg: Message) -> None:
        """Answer one guest query (a refusal costs nothing: no LLM request)."""
        query_id, user = msg.guest_query_id, msg.from_user
        if not query_id or user is None:
            return
        me = bot.bot
        if not self.enabled:
            log.info("guest query of user %s answered with 'off': GUEST_MODE is off", user.id)
            await self._answer(bot, query_id, article("off", "Guest mode is off", OFF))
            return
        if not self.access.serves(user.id, "private", user.id):
            log.info("refused guest query of user %s", user.id)
            await self._answer(
                bot, query_id, article("refused", "Not allowed", USER_REFUSAL.format(user_id=user.id))
            )
            return
        question = question_of(msg, me)
        if not question:
            await self._answer(
                bot, query_id, article("empty", "Ask me something", EMPTY.format(name=me.username))
            )
            return
        token = await self.guests.link(user.id, question)
        number = self.guests.number()
        sent = await self._answer(
            bot, query_id, article(str(number), "Answer", ANSWERING, stop_markup(number))
        )
        if sent is None:
            return  # the query could not be answered (expired): no turn is run for nobody to see
        sink = InlineMessageSink(bot, sent, "", stop_markup(number), self.edit_interval_s)
        outcome = await self.guests.run(
            number, user.id, question, GUEST, sink, first_name=user.first_name, username=user.username
        )
        text, entities = final_text("", outcome)
        await sink.finish(text, entities, continue_markup(me.username, token))

    @staticmethod
    async def _answer(bot: Bot, query_id: str, result: InlineQueryResultArticle) -> str | None:
        """answerGuestQuery; the sent message's inline_message_id, None when it failed."""
        try:
            sent = await bot.answer_guest_query(query_id, result)
        except TelegramError as exc:
            log.warning("could not answer guest query: %s", exc)
            return None
        return sent.inline_message_id


def stop_number(data: str | None) -> int:
    """The turn number of a guest Stop button's data (gstop:<number>), -1 when there is none."""
    raw = (data or "").removeprefix("gstop:")
    return int(raw) if raw.isdigit() else -1
