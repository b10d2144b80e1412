"""Sends messages outside a running turn (background jobs, notices) with the same rendering as answers."""

from __future__ import annotations

from telegram import Bot

from bot.adapter.streaming import StreamingReply
from db.topics import Place, Topics


class TelegramNotifier:
    """Implements core_tools' Notifier; the bot is attached once the Application exists."""

    def __init__(self, topics: Topics | None = None) -> None:
        self.bot: Bot | None = None
        self.topics = topics  # where a forum topic's conversation key is answered

    async def send(self, chat_id: int, text: str) -> None:
        """Send Markdown `text` to the chat (or forum topic), split and with the plain-text fallback."""
        if self.bot is None:
            raise RuntimeError("the Telegram bot is not started yet")
        place = self.topics.place(chat_id) if self.topics is not None else Place(chat_id)
        await StreamingReply(self.bot, place.chat_id, thread_id=place.thread_id).finish(text)
