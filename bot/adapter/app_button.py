"""The chat's side of the app: the menu button that opens it and the /app command's button.

Telegram opens a Mini App from a `web_app` button only in a private chat with the bot, and only from an
https:// address (WEBAPP_URL, served by the operator's reverse proxy).
"""

from __future__ import annotations

import logging

from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, MenuButtonWebApp, Update, WebAppInfo
from telegram.error import TelegramError

from bot.adapter.context import Ctx

log = logging.getLogger(__name__)

BUTTON_TEXT = "Open the app"
MENU_TEXT = "App"
NOT_SET_UP = (
    "The app is not set up on this bot: its operator sets WEBAPP_LISTEN and WEBAPP_URL (see the README)."
)
PRIVATE_ONLY = "The app opens from a private chat with me: send /app there."
INTRO = "Your memories, reminders, usage, code runs and files:"


async def set_menu_button(bot: Bot, url: str | None) -> None:
    """Make the chat menu button (every private chat's default) open the app at `url`; logged on failure.

    Unset, the button is left as it is (it may be the operator's own, set in @BotFather)."""
    if not url:
        return
    try:
        await bot.set_chat_menu_button(menu_button=MenuButtonWebApp(MENU_TEXT, WebAppInfo(url)))
        log.info("the chat menu button opens the app at %s", url)
    except TelegramError as exc:  # non-essential: /app still works
        log.warning("setChatMenuButton failed: %s", exc)


class AppCommand:
    """/app: a button that opens the app (WEBAPP_URL)."""

    def __init__(self, url: str | None) -> None:
        self.url = url

    async def app(self, update: Update, context: Ctx) -> None:
        """/app."""
        msg, chat = update.effective_message, update.effective_chat
        assert msg is not None and chat is not None
        if not self.url:
            await msg.reply_text(NOT_SET_UP)
        elif chat.type != "private":
            await msg.reply_text(PRIVATE_ONLY)
        else:
            button = InlineKeyboardButton(BUTTON_TEXT, web_app=WebAppInfo(self.url))
            await msg.reply_text(INTRO, reply_markup=InlineKeyboardMarkup([[button]]))
