"""The database side of a memory write and of an undo: one transaction each, with its history rows.

MemoryStore (core_tools.memory.store) embeds and asks the judge first, outside any transaction; these
functions then apply the decision. A target that changed meanwhile (forgotten, superseded) turns the
decision into ADD.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from core_tools.errors import ToolError
from core_tools.memory.judge import Decision
from db import memories as q
from db import memory_history as h
from db.memories import NewMemory
from db.models import Memory, MemoryChange


@dataclass(frozen=True)
class Write:
    """A validated memory to store, with the judge's decision, who asked and the vector an update needs."""

    memory: NewMemory  # the row inserted unless the decision updates or restates an existing one
    actor: str
    supersedes: str | None
    decision: Decision
    merged_vector: list[float] | None = None
    merged_embedder_id: str | None = None


def _dt(value: str | None) -> datetime | None:
    return None if not value else datetime.fromisoformat(value)


def apply_write(s: Session, w: Write) -> dict[str, Any]:
    """Add, update, supersede or leave as known; "memory" in the result is the row written or found."""
    new = w.memory
    explicit: Memory | None = None
    if w.supersedes:
        explicit = q.get_memory(s, new.user_id, w.supersedes)
        if explicit is None or explicit.superseded_by is not None:
            raise ToolError(f"no current memory with id {w.supersedes!r} to supersede")
    target: Memory | None = None
    if w.decision.target:
        target = q.get_memory(s, new.user_id, w.decision.target)
        if target is None or target.superseded_by is not None:
            target = None  # changed while the judge thought: adding loses nothing
    if target is not None and w.decision.action == "NONE":
        target.updated_at = new.now
        target.expires_at = new.expires_at if target.expires_at is not None else None
        return {"status": "already_known", "memory": target, "reason": w.decision.reason}
    if target is not None and w.decision.action == "UPDATE" and w.decision.text:
        old_text = target.content
        mem = q.update_memory(
            s,
            target,
            content=w.decision.text,
            category=target.category,
            now=new.now,
            certainty=new.certainty,
            expires_at=new.expires_at,
            vector=w.merged_vector,
            embedder_id=w.merged_embedder_id,
        )
        mem.untrusted = mem.untrusted or new.untrusted
        h.record(
            s,
            user_id=new.user_id,
            memory_id=mem.public_id,
            action="update",
            actor="judge",
            now=new.now,
            old_text=old_text,
            new_text=mem.content,
            reason=f"{w.decision.reason} (asked to store: {new.content})",
        )
        return {
            "status": "updated_existing",
            "memory": mem,
            "previous_text": old_text,
            "undo": f"/memory undo {mem.public_id} restores the previous text",
        }
    mem = q.insert_memory(s, new)
    h.record(
        s,
        user_id=new.user_id,
        memory_id=mem.public_id,
        action="add",
        actor=w.actor,
        now=new.now,
        new_text=new.content,
        reason=w.decision.reason,
    )
    result: dict[str, Any] = {"status": "created", "memory": mem}
    superseded: list[tuple[Memory, str, str]] = []
    if explicit is not None:
        superseded.append((explicit, w.actor, "the model said it corrects this one"))
    if target is not None and w.decision.action == "SUPERSEDE" and target is not explicit:
        superseded.append((target, "judge", w.decision.reason))
    for old, by, why in superseded:
        q.mark_superseded(s, old, mem.public_id)
        h.record(
            s,
            user_id=new.user_id,
            memory_id=old.public_id,
            action="supersede",
            actor=by,
            now=new.now,
            old_text=old.content,
            new_text=new.content,
            related_id=mem.public_id,
            reason=why,
        )
    if superseded:
        result["superseded"] = [{"id": m.public_id, "content": m.content} for m, _, _ in superseded]
        result["undo"] = f"/memory undo {superseded[0][0].public_id} makes it current again"
    return result


def apply_undo(
    s: Session,
    user_id: int,
    change_id: int,
    now: datetime,
    vector: list[float] | None,
    embedder_id: str | None,
) -> dict[str, Any] | None:
    """Undo one history row (`vector`: of the text it restores); None when there is nothing to undo."""
    change = s.get(MemoryChange, change_id)
    if change is None or change.undone_at is not None:
        return None
    mem = q.get_memory(s, user_id, change.memory_id)
    if change.action == "update":
        if mem is None or change.old_text is None:
            return None
        current = mem.content
        q.update_memory(
            s,
            mem,
            content=change.old_text,
            category=mem.category,
            now=now,
            certainty=None,
            expires_at=mem.expires_at,
            vector=vector,
            embedder_id=embedder_id,
        )
        detail = f"restored the text before the update (was: {current})"
    elif change.action == "supersede":
        if mem is None:
            return None
        mem.superseded_by = None
        detail = "it is current again"
    elif change.action == "forget":
        snap = change.snapshot or {}
        if mem is not None or not snap:
            return None
        restored = NewMemory(
            user_id=user_id,
            layer=snap["layer"],
            category=snap["category"],
            content=snap["content"],
            now=datetime.fromisoformat(snap["created_at"]),
            certainty=snap.get("certainty"),
            session_id=snap.get("session_id"),
            expires_at=_dt(snap.get("expires_at")),
            vector=vector,
            embedder_id=embedder_id,
            origin=snap.get("origin") or "model",
            untrusted=bool(snap.get("untrusted")),
            said_at=_dt(snap.get("said_at")),
            event_at=_dt(snap.get("event_at")),
            context=snap.get("context"),
            speaker=snap.get("speaker"),
            public_id=change.memory_id,
        )
        mem = q.insert_memory(s, restored)
        for revived in snap.get("revived") or []:
            again = q.get_memory(s, user_id, revived)
            if again is not None and again.superseded_by is None:
                again.superseded_by = change.memory_id
        detail = "it is back"
    else:  # add
        if mem is None:
            return None
        q.forget(s, user_id, change.memory_id)
        detail = "it is forgotten again"
    change.undone_at = now
    h.record(
        s,
        user_id=user_id,
        memory_id=change.memory_id,
        action="undo",
        actor="user",
        now=now,
        old_text=change.new_text,
        new_text=change.old_text,
        reason=f"undo of {change.action}",
    )
    return {
        "action": change.action,
        "memory_id": change.memory_id,
        "content": change.old_text or change.new_text,
        "detail": detail,
    }
