"""Memory history (every add, update, supersede and forget, with the old text) and extraction marks.

A change is undone by restoring what its row recorded: the old text of an update, the superseded memory of a
supersede, the whole row of a forget (its `snapshot`); undoing an add forgets the memory again. Like
db.memories, every function takes a Session and leaves committing to the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from db.models import ChatSession, Memory, MemoryChange, MemoryExtraction, Message

ACTIONS = ("add", "update", "supersede", "forget")
ACTORS = ("judge", "model", "user", "extraction")


def record(
    s: Session,
    *,
    user_id: int,
    memory_id: str,
    action: str,
    actor: str,
    now: datetime,
    old_text: str | None = None,
    new_text: str | None = None,
    related_id: str | None = None,
    reason: str | None = None,
    snapshot: dict[str, Any] | None = None,
) -> MemoryChange:
    """Add a history row for one change of a memory."""
    row = MemoryChange(
        user_id=user_id,
        memory_id=memory_id,
        action=action,
        actor=actor,
        old_text=old_text,
        new_text=new_text,
        related_id=related_id,
        reason=(reason or "")[:500] or None,
        snapshot=snapshot,
        created_at=now,
    )
    s.add(row)
    return row


def snapshot(mem: Memory, revived: list[str]) -> dict[str, Any]:
    """What restoring a forgotten memory needs: its columns and the memories its forgetting revived."""
    return {
        "layer": mem.layer,
        "category": mem.category,
        "content": mem.content,
        "certainty": mem.certainty,
        "session_id": mem.session_id,
        "created_at": mem.created_at.isoformat(),
        "expires_at": mem.expires_at.isoformat() if mem.expires_at else None,
        "origin": mem.origin,
        "untrusted": mem.untrusted,
        "said_at": mem.said_at.isoformat() if mem.said_at else None,
        "event_at": mem.event_at.isoformat() if mem.event_at else None,
        "context": mem.context,
        "speaker": mem.speaker,
        "revived": revived,
    }


def history(s: Session, user_id: int, memory_id: str, limit: int = 20) -> list[MemoryChange]:
    """A memory's changes (as the changed memory or as the one that replaced it), newest first."""
    return list(
        s.execute(
            select(MemoryChange)
            .where(
                MemoryChange.user_id == user_id,
                (MemoryChange.memory_id == memory_id) | (MemoryChange.related_id == memory_id),
            )
            .order_by(MemoryChange.id.desc())
            .limit(limit)
        ).scalars()
    )


def last_change(s: Session, user_id: int, memory_id: str | None = None) -> MemoryChange | None:
    """The newest change not yet undone (of one memory, or of any of the user's); undos are not changes."""
    stmt = select(MemoryChange).where(
        MemoryChange.user_id == user_id, MemoryChange.undone_at.is_(None), MemoryChange.action != "undo"
    )
    if memory_id is not None:
        stmt = stmt.where(MemoryChange.memory_id == memory_id)
    return s.execute(stmt.order_by(MemoryChange.id.desc()).limit(1)).scalar_one_or_none()


@dataclass(frozen=True)
class RecentMemory:
    """A memory added recently and whether it is still current."""

    memory: Memory
    actor: str
    at: datetime


def recent_adds(s: Session, user_id: int, since: datetime, limit: int = 20) -> list[RecentMemory]:
    """Memories added or rewritten since `since` that still exist, newest first (for /memory recent)."""
    rows = s.execute(
        select(MemoryChange, Memory)
        .join(Memory, Memory.public_id == MemoryChange.memory_id)
        .where(
            MemoryChange.user_id == user_id,
            MemoryChange.created_at >= since,
            MemoryChange.action.in_(("add", "update")),
            MemoryChange.undone_at.is_(None),
            Memory.superseded_by.is_(None),
        )
        .order_by(MemoryChange.id.desc())
        .limit(limit * 3)
    ).all()
    seen: set[str] = set()
    out: list[RecentMemory] = []
    for change, mem in rows:
        if mem.public_id in seen:
            continue
        seen.add(mem.public_id)
        out.append(RecentMemory(mem, change.actor, change.created_at))
    return out[:limit]


# -- extraction marks ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SaidMessage:
    """A message of a session as extraction reads it."""

    id: int
    role: str
    content: str
    tool_name: str | None
    created_at: datetime


_SAID = select(Message.id, Message.role, Message.content, Message.tool_name, Message.created_at)


def _said(r: Any) -> SaidMessage:  # a Row of _SAID
    return SaidMessage(int(r.id), str(r.role), str(r.content or ""), r.tool_name, r.created_at)


def messages_after(s: Session, session_id: str, after_id: int, limit: int = 200) -> list[SaidMessage]:
    """The session's messages after `after_id`, oldest first, with their times."""
    rows = s.execute(
        _SAID.where(Message.session_id == session_id, Message.id > after_id).order_by(Message.id).limit(limit)
    ).all()
    return [_said(r) for r in rows]


def message_at(s: Session, session_id: str, message_id: int) -> SaidMessage | None:
    """The session's message with this id (None: none, or 0)."""
    r = s.execute(_SAID.where(Message.session_id == session_id, Message.id == message_id)).first()
    return None if r is None else _said(r)


def extracted_upto(s: Session, session_id: str) -> int:
    """The last message id extraction has read in this session (0 when none)."""
    row = s.get(MemoryExtraction, session_id)
    return 0 if row is None else int(row.last_message_id)


def mark_extracted(s: Session, session_id: str, user_id: int, message_id: int, now: datetime) -> None:
    """Remember that extraction has read the session up to `message_id`."""
    row = s.get(MemoryExtraction, session_id)
    if row is None:
        s.add(
            MemoryExtraction(
                session_id=session_id, user_id=user_id, last_message_id=message_id, updated_at=now
            )
        )
    elif message_id > row.last_message_id:
        row.last_message_id = message_id
        row.updated_at = now


def sessions_with_unread(s: Session, since: datetime, limit: int = 100) -> list[tuple[str, int, bool]]:
    """(session id, user id, ended) of sessions with user messages since `since` that extraction has not
    read: the catch-up at start after a restart cut a pending extraction."""
    rows = s.execute(
        select(ChatSession.id, ChatSession.user_id, ChatSession.ended_at, MemoryExtraction.last_message_id)
        .outerjoin(MemoryExtraction, MemoryExtraction.session_id == ChatSession.id)
        .where(ChatSession.last_activity_at >= since)
        .limit(limit)
    ).all()
    out: list[tuple[str, int, bool]] = []
    for sid, uid, ended, upto in rows:
        newer = s.execute(
            select(Message.id)
            .where(Message.session_id == sid, Message.role == "user", Message.id > (upto or 0))
            .limit(1)
        ).first()
        if newer is not None:
            out.append((str(sid), int(uid), ended is not None))
    return out
