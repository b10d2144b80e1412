"""Session division: ending the current session and starting a new one."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from db.conversations import Conversations, SessionInfo

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class NewSession:
    """What happened when a session was ended and a new one started."""

    old: SessionInfo | None
    new: SessionInfo
    carried: str | None = None  # the summary carried forward, if any


class SessionManager:
    """Starts new sessions for `/newsession`, the model and the daily rollover."""

    def __init__(self, conversations: Conversations) -> None:
        self.conversations = conversations

    async def new_session(self, user_id: int, chat_id: int, name: str | None = None) -> NewSession:
        """End the user's open session (if any) and start a new one."""
        conv = self.conversations
        old = conv.current_session(user_id, chat_id)
        has_messages = bool(conv.messages(old.id, limit=1))
        conv.end_session(old.id)
        new = conv.start_session(user_id, chat_id, name)
        return NewSession(old if has_messages else None, new)
