"""The models the operator allows (LLM_MODELS) with their price, and each chat's choice among them: what
/model shows and changes, whichever front end asks (Telegram gives buttons, the terminal numbers)."""

from __future__ import annotations

from core_tools.usage.prices import PriceTable
from db.conversations import Conversations


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

    def chosen_text(self, model: str) -> str:
        """ "Model of this chat: MODEL (its price)."."""
        return f"Model of this chat: {model} ({price_label(self.prices, model)})."

    def menu(self, chat_id: int) -> tuple[str, list[str]]:
        """The /model text and a label for each of `models`, in their order, the chat's one ticked (no
        labels when there is nothing to choose)."""
        current = self.for_chat(chat_id) or self.default
        lines = [self.chosen_text(current)]
        if len(self.models) < 2:
            lines.append("The operator allows no other model (LLM_MODELS).")
            return "\n".join(lines), []
        lines.append("Choose another one:")
        labels = [f"{'✓ ' if m == current else ''}{m} · {price_label(self.prices, m)}" for m in self.models]
        return "\n".join(lines), labels
