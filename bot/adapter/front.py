"""The Telegram chat as the turn runtime's front end (bot/runtime/front.py): a turn streams into a message
that is edited as the answer grows (bot/adapter/streaming.py) and ends as the rendered answer
(bot/adapter/answers.py); "typing" shows while the chat waits; a voice note's answer is spoken too."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager

from telegram import Bot
from telegram.error import TelegramError

from bot.adapter.answers import deliver
from bot.adapter.streaming import StreamingReply, typing_indicator
from bot.runtime.queue import Incoming
from bot.runtime.vigil.deliveries import Deliveries
from core_tools.agent import TurnResult
from db.topics import Topics

log = logging.getLogger(__name__)

Speak = Callable[[Incoming, str], Awaitable[None]]


class TelegramReply(StreamingReply):
    """A turn's reply in a Telegram chat: the streaming message, then the answer (and its voice note)."""

    def __init__(
        self,
        bot: Bot,
        chat_id: int,
        speak: Speak | None,
        *,
        min_interval: float,
        stop_data: str,
        reply_to: int | None,
        thread_id: int | None,
        guard: Callable[[], Awaitable[bool]],
        deliveries: Deliveries | None = None,
        retry_s: float = 0.0,
        keep_trying: Callable[[], bool] = lambda: True,
    ) -> None:
        super().__init__(
            bot,
            chat_id,
            min_interval=min_interval,
            stop_data=stop_data,
            reply_to=reply_to,
            thread_id=thread_id,
            guard=guard,
            deliveries=deliveries,
            retry_s=retry_s,
            keep_trying=keep_trying,
        )
        self.speak = speak
        self._touched = False

    @property
    def shown(self) -> bool:
        return self._touched

    async def text(self, partial: str) -> None:
        self._touched = True
        await super().text(partial)

    async def status(self, line: str) -> None:
        self._touched = True
        await super().status(line)

    async def end(self, task: asyncio.Task[TurnResult], batch: Sequence[Incoming], info_button: bool) -> None:
        heard = [b.heard for b in batch if b.heard is not None]
        answer = await deliver(self, task, any(b.media_ids for b in batch), heard, info_button=info_button)
        if answer is not None and self.speak is not None and any(b.speak for b in batch):
            await self.speak(batch[0], answer)  # still in the chat's lock: before the next turn's answer


class TelegramFront:
    """The runtime's ChatFront on the Bot API: `topics` says where a conversation key's messages go."""

    def __init__(
        self,
        bot: Bot,
        topics: Topics,
        *,
        edit_interval_s: float = 1.0,
        typing_delay_s: float = 0.0,
        speak: Speak | None = None,
        deliveries: Deliveries | None = None,
        answer_retry_s: float = 0.0,
        keep_trying: Callable[[], bool] = lambda: True,
    ) -> None:
        self.bot = bot
        # Answers whose sends keep failing are retried for `answer_retry_s` and reported to `deliveries`
        # meanwhile (the watchdog, bot/runtime/vigil/).
        self.deliveries = deliveries
        self.answer_retry_s = answer_retry_s
        self.keep_trying = keep_trying  # False once the application stops
        self.topics = topics
        self.edit_interval_s = edit_interval_s
        self.typing_delay_s = typing_delay_s
        self.speak = speak  # the answer to a voice note as a voice note too (bot/adapter/media.py)

    def reply(self, head: Incoming, number: int, guard: Callable[[], Awaitable[bool]]) -> TelegramReply:
        place = self.topics.place(head.chat_id)
        return TelegramReply(
            self.bot,
            place.chat_id,
            self.speak,
            min_interval=self.edit_interval_s,
            stop_data=f"stop:{number}",
            reply_to=head.reply_to,
            thread_id=place.thread_id,
            guard=guard,
            deliveries=self.deliveries,
            retry_s=self.answer_retry_s,
            keep_trying=self.keep_trying,
        )

    def typing(self, chat_id: int, last_sent: float | None = None) -> AbstractAsyncContextManager[object]:
        place = self.topics.place(chat_id)
        return typing_indicator(
            self.bot, place.chat_id, last_sent=last_sent, thread_id=place.thread_id, delay=self.typing_delay_s
        )

    async def tell(self, chat_id: int, text: str) -> None:
        place = self.topics.place(chat_id)
        try:
            await self.bot.send_message(place.chat_id, text, message_thread_id=place.thread_id)
        except TelegramError as exc:
            log.warning("could not tell chat %s: %s", chat_id, exc)
