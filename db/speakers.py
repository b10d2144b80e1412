"""Who speaks, in which conversation: the one definition of a message's chat identity.

A message carries its `Speaker` through every form it takes (docs/design-notes.md, "A message's forms"): the
inbox's `Entry` (db/runtime/inbox.py), the runtime's `Incoming` (bot/runtime/queue.py), the turn's
`TurnInput` (core_tools/agent/turn.py) and what the turn stores first (`TurnOpening`,
db/conversation_records.py).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Speaker:
    """A user speaking in a conversation: `chat_id` is its conversation key (a chat, or a forum topic:
    db/topics.py), `chat_type` Telegram's type of the chat (None: unknown, which counts as private only in
    the user's own chat id: `chat_type_of`), and the names Telegram gave the user."""

    user_id: int
    chat_id: int
    chat_type: str | None = None
    first_name: str | None = None
    username: str | None = None


def chat_type_of(user_id: int, chat_id: int, chat_type: str | None) -> str:
    """The chat's type as a session (or the inbox) stores it."""
    # Unknown type: only the user's own chat id (a Telegram private chat's id) counts as private.
    return chat_type or ("private" if chat_id == user_id else "group")
