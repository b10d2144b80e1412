"""/model: the models the operator allows (LLM_MODELS) as buttons with their price; one choice per chat."""

from __future__ import annotations

import logging
from collections.abc import Awaitable

from telegram import InlineKeyboardButton, InlineKeyboardMarkup, Update
from telegram.error import TelegramError

from bot.adapter.context import Ctx
from bot.adapter.groups import Access, is_group
from core_tools.usage.prices import PriceTable
from db.conversations import Conversations

log = logging.getLogger(__name__)

PREFIX = "model:"


def price_label(prices: PriceTable, model: str) -> str:
    """ "$0.15 in / $0.60 out per 1M tokens", or "price unknown"."""
    price = prices.lookup(model)
    if price is None:
        return "price unknown"
    return f"${price.input:g} in / ${price.output:g} out per 1M tokens"


class ModelChoice:
    """Which model each chat uses: its stored choice while the operator still allows it, else the default."""

    def __init__(self, models: list[str], conversations: Conversations, prices: PriceTable) -> None:
        self.models = models
        self.conversations = conversations
        self.prices = prices

    @property
    def default(self) -> str:
        """The operator's default model (the first of LLM_MODELS)."""
        return self.models[0]

    def for_chat(self, chat_id: int) -> str | None:
        """The chat's model, or None for the default (sent to the agent with each turn). Read for each turn:
        another process may have changed it (one small indexed read; none when there is nothing to choose)."""
        if len(self.models) < 2:
            return None
        chosen = self.conversations.chat_model(chat_id)
        return chosen if chosen in self.models and chosen != self.default else None

    def set(self, chat_id: int, model: str, by_user: int) -> None:
        """Choose a model (one of `models`) for the chat."""
        stored = None if model == self.default else model
        self.conversations.set_chat_model(chat_id, stored, by_user)

    def menu(self, chat_id: int) -> tuple[str, InlineKeyboardMarkup | None]:
        """The /model text and its buttons."""
        current = self.for_chat(chat_id) or self.default
        lines = [f"Model of this chat: {current} ({price_label(self.prices, current)})."]
        if len(self.models) < 2:
            lines.append("The operator allows no other model (LLM_MODELS).")
            return "\n".join(lines), None
        lines.append("Choose another one:")
        buttons = [
            [
                InlineKeyboardButton(
                    f"{'✓ ' if m == current else ''}{m} · {price_label(self.prices, m)}"[:64],
                    callback_data=f"{PREFIX}{i}",
                )
            ]
            for i, m in enumerate(self.models)
        ]
        return "\n".join(lines), InlineKeyboardMarkup(buttons)


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

    async def model(self, update: Update, context: Ctx) -> None:
        """/model: the current model and the choices."""
        msg, chat = update.effective_message, update.effective_chat
        assert msg and chat
        text, markup = self.choice.menu(chat.id)
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
            await query.edit_message_text(
                f"Model of this chat: {model} ({price_label(self.choice.prices, model)})."
            )
        except TelegramError as exc:
            log.info("could not update the /model message: %s", exc)

    @staticmethod
    async def _answer(call: Awaitable[object]) -> None:
        try:
            await call
        except TelegramError as exc:
            log.debug("answerCallbackQuery failed: %s", exc)
