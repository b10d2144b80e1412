"""How a turn's end is shown in the chat: the answer (with a voice note's "heard" line), or why not."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from telegram import MessageEntity

from bot.adapter.answer_info import info_markup
from bot.adapter.render import TELEGRAM_LIMIT, Rendered, render, utf16_len
from bot.adapter.streaming import StreamingReply
from bot.runtime.endings import NO_ANSWER, NO_VISION_NOTE, STOP_NOTES, STOPPED_MARK, turn_failure_text
from core_tools.agent import TurnResult
from core_tools.errors import BudgetExceeded, LLMUnavailable

log = logging.getLogger(__name__)

HEARD_COLLAPSE_CHARS = 200  # a longer transcript is shown as a collapsed (expandable) quote


def with_heard(transcript: str, answer: str) -> list[Rendered]:
    """The answer with a quoted "heard: ..." line on top (collapsed when the transcript is long)."""
    quote = f"heard: \u201c{transcript}\u201d"
    if utf16_len(quote) > TELEGRAM_LIMIT - 100:
        quote = quote[: TELEGRAM_LIMIT - 110] + "\u2026\u201d"
    kind = (
        MessageEntity.EXPANDABLE_BLOCKQUOTE
        if len(transcript) > HEARD_COLLAPSE_CHARS
        else MessageEntity.BLOCKQUOTE
    )
    head = Rendered(quote, (MessageEntity(kind, 0, utf16_len(quote)),))
    parts = render(answer) or [Rendered("(empty answer)", ())]
    first = parts[0]
    shift = utf16_len(quote) + 2
    if shift + utf16_len(first.text) > TELEGRAM_LIMIT:
        return [head, *parts]
    moved = tuple(
        MessageEntity(
            e.type,
            e.offset + shift,
            e.length,
            url=e.url,
            user=e.user,
            language=e.language,
            custom_emoji_id=e.custom_emoji_id,
        )
        for e in first.entities
    )
    return [Rendered(f"{quote}\n\n{first.text}", head.entities + moved), *parts[1:]]


async def deliver(
    reply: StreamingReply,
    task: asyncio.Task[TurnResult],
    with_media: bool,
    heard: Sequence[str],
    info_button: bool = False,
) -> str | None:
    """Show how the turn ended; returns the answer when there is one. `info_button`: an answered turn's
    last message carries the ⓘ button of its "why this answer" view (bot/adapter/answer_info.py)."""
    if task.cancelled():
        # Stopped before the turn began, or at a point where the turn could not end itself (a database
        # call it was waiting for): what was already streamed stays, as when the turn stops itself.
        partial = reply.streamed.strip()
        if partial:
            await reply.finish(f"{partial}\n\n{STOPPED_MARK}")
        else:
            await reply.finish_plain(STOPPED_MARK)
        return None
    exc = task.exception()
    if exc is not None:
        if not isinstance(exc, BudgetExceeded | LLMUnavailable | TimeoutError):
            log.error("error while answering in chat %s", reply.chat_id, exc_info=exc)
        await reply.finish_plain(turn_failure_text(exc))
    else:
        result = task.result()
        if result.stopped_by == "user":
            partial = result.text.strip()
            await reply.finish(f"{partial}\n\n{STOPPED_MARK}" if partial else STOPPED_MARK)
            return None
        answer = result.text.strip() or NO_ANSWER
        if result.stopped_by in STOP_NOTES:
            answer = f"{answer}\n\n{STOP_NOTES[result.stopped_by]}"
        if result.images_dropped and with_media:
            answer = f"{answer}\n\n{NO_VISION_NOTE}"
        markup = info_markup(result.answer_id) if info_button and result.answer_id is not None else None
        if heard:
            await reply.finish_rendered(with_heard(" / ".join(heard), answer), markup)
        else:
            await reply.finish(answer, markup)
        return answer
    return None
