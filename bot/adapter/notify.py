"""Sends messages outside a running turn (background jobs, notices) with the same rendering as answers."""

from __future__ import annotations

from telegram import Bot

from bot.adapter.streaming import StreamingReply
from db.topics import Place, Topics


class TelegramNotifier:
    """Implements core_tools' Notifier through the application's bot."""

    def __init__(self, topics: Topics | None, bot: Bot) -> None:
        self.bot = bot
        self.topics = topics  # where a forum topic's conversation key is answered

    async def send(self, chat_id: int, text: str) -> None:
        """Send Markdown `text` to the chat (or forum topic), split and with the plain-text fallback."""
        place = self.topics.place(chat_id) if self.topics is not None else Place(chat_id)
        await StreamingReply(self.bot, place.chat_id, thread_id=place.thread_id).finish(text)
