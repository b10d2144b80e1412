"""Sends messages outside a running turn (background jobs, notices) with the same rendering as answers."""

from __future__ import annotations

from telegram import Bot

from bot.streaming import StreamingReply


class TelegramNotifier:
    """Implements core_tools' Notifier; the bot is attached once the Application exists."""

    def __init__(self) -> None:
        self.bot: Bot | None = None

    async def send(self, chat_id: int, text: str) -> None:
        """Send Markdown `text` to the chat, split and with the plain-text fallback."""
        if self.bot is None:
            raise RuntimeError("the Telegram bot is not started yet")
        await StreamingReply(self.bot, chat_id).finish(text)
