"""The runtime's outbox (bot/runtime/outbox.py) through the Bot API: a conversation key is sent to its chat or
forum topic, Markdown is rendered as answers are (bot/adapter/render.py, plain text when Telegram refuses
the entities), buttons become an inline keyboard, and Telegram's errors become the runtime's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup
from telegram.error import BadRequest, Forbidden, RetryAfter, TelegramError

from bot.adapter.render import render
from bot.runtime.outbox import Blocked, Buttons, DeliveryFailed, Refused, RetryLater
from db.topics import Place, Topics

UPLOAD_TIMEOUT_S = 600.0  # a backup part of up to 50 MB over a slow link


def keyboard(buttons: Buttons) -> InlineKeyboardMarkup | None:
    """The inline keyboard of `buttons` (None for none)."""
    if not buttons:
        return None
    return InlineKeyboardMarkup(
        [[InlineKeyboardButton(label, callback_data=data) for label, data in row] for row in buttons]
    )


def retry_seconds(exc: RetryAfter) -> float:
    """How long Telegram asked to wait."""
    wait = exc.retry_after
    return wait.total_seconds() if isinstance(wait, timedelta) else float(wait)


@asynccontextmanager
async def translated() -> AsyncIterator[None]:
    """Telegram's errors as the runtime's (bot/runtime/outbox.py)."""
    try:
        yield
    except Forbidden as exc:
        raise Blocked(str(exc)) from exc
    except RetryAfter as exc:
        raise RetryLater(str(exc), retry_seconds(exc)) from exc
    except BadRequest as exc:
        raise Refused(str(exc)) from exc
    except TelegramError as exc:
        raise DeliveryFailed(str(exc)) from exc


class TelegramOutbox:
    """Sends through `bot` to the chat or forum topic a conversation key stands for (`topics`; None: every
    key is a chat id)."""

    def __init__(self, bot: Bot, topics: Topics | None) -> None:
        self.bot = bot
        self.topics = topics

    def _place(self, chat_id: int) -> Place:
        return self.topics.place(chat_id) if self.topics is not None else Place(chat_id)

    async def send(
        self, chat_id: int, text: str, *, markdown: bool = False, buttons: Buttons = ()
    ) -> int | None:
        """Send `text` (rendered when `markdown`, in as many messages as it takes; the buttons go under the
        last); the id of the first message."""
        place = self._place(chat_id)
        markup = keyboard(buttons)
        parts = render(text) if markdown else []
        async with translated():
            if not parts:
                msg = await self.bot.send_message(
                    place.chat_id, text, reply_markup=markup, message_thread_id=place.thread_id
                )
                return msg.message_id
            first: int | None = None
            for n, part in enumerate(parts, 1):
                last = markup if n == len(parts) else None
                try:
                    msg = await self.bot.send_message(
                        place.chat_id,
                        part.text,
                        entities=part.entities or None,
                        reply_markup=last,
                        message_thread_id=place.thread_id,
                    )
                except BadRequest as exc:
                    if not part.entities or "entit" not in str(exc).lower():
                        raise
                    msg = await self.bot.send_message(
                        place.chat_id, part.text, reply_markup=last, message_thread_id=place.thread_id
                    )
                first = first or msg.message_id
            return first

    async def send_file(self, chat_id: int, path: Path, caption: str) -> None:
        """Send the file as a document of its own name (its content type is not guessed)."""
        place = self._place(chat_id)
        data = await asyncio.to_thread(path.read_bytes)
        async with translated():
            await self.bot.send_document(
                place.chat_id,
                document=data,
                filename=path.name,
                caption=caption,
                message_thread_id=place.thread_id,
                disable_content_type_detection=True,
                read_timeout=UPLOAD_TIMEOUT_S,
                write_timeout=UPLOAD_TIMEOUT_S,
            )
