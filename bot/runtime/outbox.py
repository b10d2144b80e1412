"""What the runtime's jobs need of the front end to deliver outside a turn (reminders, scheduled tasks'
answers, a session's rollover, the owner's notices, backup files), handed to them at construction.

The Telegram adapter implements it (its outbox module). A chat is a conversation key (db/topics.py): the
front end knows where that is (a Telegram chat, a forum topic). A failed delivery raises one of the
exceptions below, so that the jobs decide alike on every front end what to do next: pause the chat's
schedules (Blocked), wait as told (RetryLater), give up on the request (Refused) or try again after a
backoff (any other DeliveryFailed).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

# Buttons under a message: rows of (label, the data the front end hands back when it is pressed).
Buttons = Sequence[Sequence[tuple[str, str]]]


class DeliveryFailed(Exception):
    """Something could not be delivered; trying again later may work (network trouble, timeouts, 5xx)."""


class Blocked(DeliveryFailed):
    """The chat takes nothing from the bot: the user blocked it, or it left the group."""


class Refused(DeliveryFailed):
    """The request is one the front end never takes (too big, an unknown chat): no use trying again."""


class RetryLater(DeliveryFailed):
    """Too many requests: try again after `seconds`."""

    def __init__(self, message: str, seconds: float) -> None:
        super().__init__(message)
        self.seconds = seconds


class Outbox(Protocol):
    """Delivering to a chat outside a turn."""

    async def send(
        self, chat_id: int, text: str, *, markdown: bool = False, buttons: Buttons = ()
    ) -> int | None:
        """Send `text` (the model's Markdown when `markdown`, split as the front end needs) with `buttons`
        under it; the id of the (first) message sent, None when the front end has none. Raises
        DeliveryFailed."""

    async def send_file(self, chat_id: int, path: Path, caption: str) -> None:
        """Send the file at `path` as a document with `caption`, once (the caller retries). Raises
        DeliveryFailed."""
