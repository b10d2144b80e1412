"""The runtime's side of the database: the inbox (a chat's queue), the processes sharing the database, the
chats and jobs they hold, the turns they run and the /stop requests between them, and the updates already
handled. bot/runtime/ is the process side."""

from db.runtime.inbox import Entry, Inbox, Queued
from db.runtime.store import (
    DEDUP_WINDOW,
    Arrival,
    Claimed,
    PendingMessage,
    Released,
    ReplicaRow,
    RunningTurn,
    RuntimeStore,
    TurnMark,
    clear_turn,
    publish_turn,
)

__all__ = [
    "DEDUP_WINDOW",
    "Arrival",
    "Claimed",
    "Entry",
    "Inbox",
    "PendingMessage",
    "Queued",
    "Released",
    "ReplicaRow",
    "RunningTurn",
    "RuntimeStore",
    "TurnMark",
    "clear_turn",
    "publish_turn",
]
