"""/model in Telegram: the models the operator allows (LLM_MODELS, bot/texts/models.py) as buttons with
their price; one choice per chat."""

from __future__ import annotations

import logging
from collections.abc import Awaitable

from telegram import InlineKeyboardButton, InlineKeyboardMarkup, Update
from telegram.error import TelegramError

from bot.adapter.context import Ctx
from bot.adapter.groups import Access, is_group
from bot.texts.models import ModelChoice

log = logging.getLogger(__name__)

PREFIX = "model:"


class ModelCommands:
    """/model and its buttons."""

    def __init__(self, choice: ModelChoice, access: Access) -> None:
        self.choice = choice
        self.access = access

    def may_change(self, user_id: int, chat_type: str) -> bool:
        """In a private chat its user; in a group, users of ALLOWED_USER_IDS and the owner (a group's model
        changes what everyone there spends)."""
        if not is_group(chat_type):
            return True
        return user_id in self.access.users or self.access.is_owner(user_id)

    def menu(self, chat_id: int) -> tuple[str, InlineKeyboardMarkup | None]:
        """The /model text and its buttons (none when there is nothing to choose)."""
        text, labels = self.choice.menu(chat_id)
        if not labels:
            return text, None
        buttons = [
            [InlineKeyboardButton(label[:64], callback_data=f"{PREFIX}{i}")] for i, label in enumerate(labels)
        ]
        return text, InlineKeyboardMarkup(buttons)

    async def model(self, update: Update, context: Ctx) -> None:
        """/model: the current model and the choices."""
        msg, chat = update.effective_message, update.effective_chat
        assert msg and chat
        text, markup = self.menu(chat.id)
        await msg.reply_text(text, reply_markup=markup)

    async def pressed(self, update: Update, context: Ctx) -> None:
        """A model button."""
        query, user, chat = update.callback_query, update.effective_user, update.effective_chat
        assert query and user
        if chat is None or not query.data:
            await self._answer(query.answer("That choice is no longer offered; send /model again."))
            return
        raw = query.data.removeprefix(PREFIX)
        index = int(raw) if raw.isdigit() else -1
        if not self.may_change(user.id, str(chat.type)):
            await self._answer(
                query.answer("Only allowed users or the bot's owner can change the model here.")
            )
            return
        if not 0 <= index < len(self.choice.models):
            await self._answer(query.answer("That choice is no longer offered; send /model again."))
            return
        model = self.choice.models[index]
        self.choice.set(chat.id, model, user.id)
        log.info("chat %s: model set to %s by %s", chat.id, model, user.id)
        await self._answer(query.answer(f"Model: {model}"))
        try:
            await query.edit_message_text(self.choice.chosen_text(model))
        except TelegramError as exc:
            log.info("could not update the /model message: %s", exc)

    @staticmethod
    async def _answer(call: Awaitable[object]) -> None:
        try:
            await call
        except TelegramError as exc:
            log.debug("answerCallbackQuery failed: %s", exc)
