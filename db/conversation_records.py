"""The conversation history's plain records: messages, sessions, and what a turn stores as it opens and
closes (db/conversations.py reads and writes them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from db.models import ChatSession
from db.runtime.store import TurnMark
from db.speakers import Speaker
from db.turn_info import TurnInfoRecord
from db.usage import LLMCallRecord


@dataclass(slots=True)
class StoredMessage:
    """A message row as plain data, not changed once read (not declared frozen: a frozen dataclass's
    constructor costs four times as much, and every turn reads one per history message).

    `derived`: what a reader computed from the row, kept with it (the agent's request form and token
    estimate: the history cache hands out the same rows turn after turn, db/history_cache.py); a copy
    made with `dataclasses.replace` starts without it."""

    id: int
    role: str
    content: str | None
    tool_calls: list[dict[str, Any]] | None
    tool_call_id: str | None
    tool_name: str | None
    status: str
    created_at: datetime | None = None
    # Opaque here (db/ cannot name core_tools' type): its one reader checks what it finds with isinstance.
    derived: object = field(default=None, init=False, repr=False, compare=False)


@dataclass(frozen=True)
class SessionInfo:
    """A session row as plain data."""

    id: str
    user_id: int
    chat_id: int
    name: str
    started_at: datetime
    last_activity_at: datetime
    ended_at: datetime | None
    chat_type: str = "private"  # private | group | supergroup | channel


def session_info(s: ChatSession) -> SessionInfo:
    """A session row as a record."""
    return SessionInfo(
        s.id, s.user_id, s.chat_id, s.name, s.started_at, s.last_activity_at, s.ended_at, s.chat_type
    )


@dataclass(frozen=True)
class UserMessage:
    """A stored user message, as /retry and edits see it."""

    id: int
    session_id: str
    user_id: int
    chat_id: int
    content: str
    status: str
    tg_message_id: int | None
    latest: bool  # no later user message in its session


@dataclass(frozen=True)
class TurnOpening:
    """What a turn stores before its first LLM request: its user messages ((text, Telegram id), in order),
    taken out of the inbox; or, for a /retry or an edit, the stored message it answers again. `speaker`:
    the turn's, its chat type resolved (the session's type)."""

    speaker: Speaker
    texts: tuple[tuple[str, int | None], ...] = ()
    inbox_ids: tuple[int, ...] = ()
    rerun_of: int | None = None
    mark: TurnMark | None = None  # the turn, published on its chat's lease


@dataclass(frozen=True)
class OpenedTurn:
    """The session a turn runs in and its user messages' ids."""

    session: SessionInfo
    message_ids: list[int]


@dataclass(frozen=True)
class Answer:
    """The assistant message that ends a turn (its content may be empty)."""

    content: str | None
    status: str = "done"  # "stopped": the partial answer of a turn the user stopped


@dataclass(frozen=True)
class TurnClosing:
    """How a turn ended: its user messages' status, the assistant message that ends it (if any), the usage
    of the LLM request that wrote it, the turn's mark to clear from its chat's lease, and what the turn
    used (`info`: stored keyed by the answer, for its "why this answer" view)."""

    session_id: str
    user_id: int
    chat_id: int
    message_ids: tuple[int, ...]
    status: str  # answered | failed | interrupted | refused | stopped
    answer: Answer | None = None
    llm_call: LLMCallRecord | None = None
    mark: TurnMark | None = None
    info: TurnInfoRecord | None = None
