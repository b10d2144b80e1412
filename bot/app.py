"""The python-telegram-bot Application: allowlist, commands, the chat handler and the global error handler."""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from telegram import BotCommand, Update
from telegram.error import TelegramError
from telegram.ext import (
    Application,
    ApplicationHandlerStop,
    CommandHandler,
    ContextTypes,
    MessageHandler,
    TypeHandler,
    filters,
)

from bot.code_commands import CodeCommands
from bot.commands import COMMANDS, help_text
from bot.media import register_media_handlers
from bot.memory_commands import MemoryCommands, schedule_jobs
from bot.streaming import StreamingReply, typing_indicator
from bot.usage_commands import register_usage_handlers
from bot.wiring import Services
from core_tools.agent import TurnInput
from core_tools.errors import BudgetExceeded, LLMUnavailable

log = logging.getLogger(__name__)

Ctx = ContextTypes.DEFAULT_TYPE

NOT_SUPPORTED = (
    "Sorry, I can only read text messages for now: stickers, photos, voice messages and files are not "
    "supported yet. Please describe what you need in words."
)
STOP_NOTES = {
    "chain_limit": "(I stopped using tools: the limit of tool calls for one message was reached.)",
    "repeat_guard": "(I stopped using tools: I was repeating the same call.)",
    "budget": "(I stopped using tools: your usage cap is reached; /usage shows it.)",
}


class ChatLocks:
    """One lock per chat: turns in a chat run in order, different chats run in parallel."""

    def __init__(self) -> None:
        self._locks: defaultdict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._users: defaultdict[int, int] = defaultdict(int)

    @asynccontextmanager
    async def hold(self, chat_id: int) -> AsyncIterator[None]:
        """Wait for the chat's turn."""
        self._users[chat_id] += 1
        try:
            async with self._locks[chat_id]:
                yield
        finally:
            self._users[chat_id] -= 1
            if self._users[chat_id] == 0:  # forget idle chats so the map does not grow forever
                del self._users[chat_id]
                self._locks.pop(chat_id, None)


class Handlers:
    """The update handlers; they translate Telegram updates into agent turns and back."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.settings = services.settings
        self.allowed = set(services.settings.allowed_user_ids or [])
        self.locks = ChatLocks()

    async def gate(self, update: object, context: Ctx) -> None:
        """The allowlist: anyone else gets a polite refusal with their id, and nothing else runs."""
        if not isinstance(update, Update):
            return
        user = update.effective_user
        if user is not None and user.id in self.allowed:
            return
        if user is not None and update.effective_message is not None:
            log.info("refused user %s (not in ALLOWED_USER_IDS)", user.id)
            await update.effective_message.reply_text(
                "Sorry, this is a private assistant and you are not on its list of allowed users.\n"
                f"Your Telegram user id is {user.id}. If you run this bot, add it to ALLOWED_USER_IDS."
            )
        raise ApplicationHandlerStop

    async def start(self, update: Update, context: Ctx) -> None:
        """/start."""
        assert update.effective_message and update.effective_user
        name = update.effective_user.first_name or "there"
        await update.effective_message.reply_text(f"Hello, {name}!\n\n{help_text()}")

    async def help(self, update: Update, context: Ctx) -> None:
        """/help."""
        assert update.effective_message
        await update.effective_message.reply_text(help_text())

    async def newsession(self, update: Update, context: Ctx) -> None:
        """/newsession [name]."""
        assert update.effective_message and update.effective_user and update.effective_chat
        name = " ".join(context.args or []).strip()[:200] or None
        async with self.locks.hold(update.effective_chat.id):
            result = await self.services.sessions.new_session(
                update.effective_user.id, update.effective_chat.id, name, str(update.effective_chat.type)
            )
        lines = [f"Started a new session: {result.new.name}."]
        if result.carried:
            lines.append(f"Carried forward as a short-term memory:\n{result.carried}")
        elif result.old is None:
            lines.append("The previous session was empty, so there was nothing to carry forward.")
        await update.effective_message.reply_text("\n".join(lines))

    async def text(self, update: Update, context: Ctx) -> None:
        """A text message: one agent turn, streamed into the chat."""
        msg, user, chat = update.effective_message, update.effective_user, update.effective_chat
        assert msg and user and chat and msg.text is not None
        # The chat's type decides what the turn may see: a group never gets the private session or memories.
        turn = TurnInput(user.id, chat.id, msg.text, user.first_name, user.username, str(chat.type))
        async with self.locks.hold(chat.id):
            reply = StreamingReply(context.bot, chat.id, min_interval=self.settings.stream_edit_interval_s)
            async with typing_indicator(context.bot, chat.id):
                try:
                    result = await self.services.agent.run_turn(turn, reply)
                except BudgetExceeded as exc:
                    await reply.finish_plain(str(exc))
                    return
                except LLMUnavailable as exc:
                    await reply.finish_plain(
                        f"Sorry, I could not get an answer: {exc}. Your message is saved; "
                        "please try again in a moment."
                    )
                    return
                except TimeoutError:
                    await reply.finish_plain(
                        "Sorry, that took too long and I stopped. Your message is saved; try again, "
                        "or ask for something smaller."
                    )
                    return
            answer = result.text.strip() or "(I have no answer to that.)"
            if result.stopped_by in STOP_NOTES:
                answer = f"{answer}\n\n{STOP_NOTES[result.stopped_by]}"
            await reply.finish(answer)

    async def unsupported(self, update: Update, context: Ctx) -> None:
        """Stickers, photos, voice...: say so."""
        if update.effective_message is not None:
            await update.effective_message.reply_text(NOT_SUPPORTED)

    async def on_error(self, update: object, context: Ctx) -> None:
        """The one global error handler: log the traceback, apologise briefly, keep serving."""
        log.error("error while handling an update", exc_info=context.error)
        if isinstance(update, Update) and update.effective_chat is not None:
            try:
                await context.bot.send_message(
                    update.effective_chat.id,
                    "Sorry, something went wrong on my side. It is logged; please try again.",
                )
            except TelegramError:
                log.warning("could not send the apology to chat %s", update.effective_chat.id)


async def on_startup(app: Application[Any, Any, Any, Any, Any, Any]) -> None:
    """Publish the command menu and tell users whose message was cut by a restart."""
    services: Services = app.bot_data["services"]
    try:
        await app.bot.set_my_commands([BotCommand(c.name, c.description) for c in COMMANDS])
    except TelegramError as exc:  # non-essential
        log.warning("setMyCommands failed: %s", exc)
    for pending in services.conversations.take_pending():
        snippet = pending.content if len(pending.content) <= 80 else pending.content[:77] + "..."
        try:
            await app.bot.send_message(
                pending.chat_id,
                f"I was restarted while answering your message \u201c{snippet}\u201d and could not finish. "
                "Please send it again if you still need an answer.",
            )
        except TelegramError as exc:
            log.warning("could not tell chat %s about an interrupted message: %s", pending.chat_id, exc)


async def on_shutdown(app: Application[Any, Any, Any, Any, Any, Any]) -> None:
    """Close HTTP clients and the database inside the event loop that used them."""
    services: Services = app.bot_data["services"]
    await services.aclose()


def build_application(services: Services) -> Application[Any, Any, Any, Any, Any, Any]:
    """Build the PTB Application with every handler."""
    settings = services.settings
    assert settings.telegram_bot_token is not None
    base_url = settings.telegram_api_base_url
    app = (
        Application.builder()
        .token(settings.telegram_bot_token.get_secret_value())
        .base_url(base_url)
        .base_file_url(base_url.replace("/bot", "/file/bot", 1))
        .concurrent_updates(True)  # order within a chat comes from ChatLocks
        .post_init(on_startup)
        .post_shutdown(on_shutdown)
        .build()
    )
    app.bot_data["services"] = services
    services.notifier.bot = app.bot
    h = Handlers(services)
    app.add_handler(TypeHandler(Update, h.gate), group=-1)
    app.add_handler(CommandHandler("start", h.start))
    app.add_handler(CommandHandler("help", h.help))
    app.add_handler(CommandHandler("newsession", h.newsession))
    code_commands = CodeCommands(services.code.executions)
    app.add_handler(CommandHandler("codestats", code_commands.codestats))
    app.add_handler(CommandHandler("codefailures", code_commands.codefailures))
    memory_commands = MemoryCommands(services)
    app.add_handler(CommandHandler("memory", memory_commands.memory))
    app.add_handler(CommandHandler("timezone", memory_commands.timezone))
    register_usage_handlers(app, services.usage_service)
    schedule_jobs(app)
    app.add_handler(MessageHandler(filters.TEXT & ~filters.COMMAND, h.text))
    app.add_handler(MessageHandler(filters.COMMAND, h.help))  # an unknown command: show what exists
    # Voice, photos, files; and everything else gets a clear "not supported" (bot/media.py).
    register_media_handlers(app, services, h.locks, STOP_NOTES)
    app.add_error_handler(h.on_error)
    app.bot_data["handlers"] = h
    return app
