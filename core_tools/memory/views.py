"""Memories and their history rows as the model (and /memory) sees them: plain dicts, times to the second."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from db.memories import MemoryRow
from db.models import Memory, MemoryChange


def iso(value: datetime | None) -> str | None:
    """A time as the model sees it: ISO 8601 to the second."""
    return None if value is None else value.isoformat(timespec="seconds")


def memory_view(mem: Memory | MemoryRow, relevance: float | None = None) -> dict[str, Any]:
    """A memory as the model sees it."""
    out: dict[str, Any] = {
        "id": mem.public_id,
        "layer": mem.layer,
        "category": mem.category,
        "content": mem.content,
        "created_at": iso(mem.created_at),
        "origin": mem.origin or "model",
    }
    if mem.updated_at != mem.created_at:
        out["updated_at"] = iso(mem.updated_at)
    if mem.untrusted:
        out["untrusted"] = True
    if mem.speaker:
        out["said_by"] = mem.speaker
    if mem.said_at is not None:
        out["said_at"] = iso(mem.said_at)
    if mem.event_at is not None:
        out["event_at"] = iso(mem.event_at)
    if mem.certainty is not None:
        out["certainty"] = mem.certainty
    if mem.expires_at is not None:
        out["expires_at"] = iso(mem.expires_at)
    if relevance is not None:
        out["relevance"] = relevance
    return out


def change_view(c: MemoryChange) -> dict[str, Any]:
    """A history row as /memory history shows it."""
    return {
        "change": c.id,
        "memory_id": c.memory_id,
        "action": c.action,
        "actor": c.actor,
        "old_text": c.old_text,
        "new_text": c.new_text,
        "related_id": c.related_id,
        "reason": c.reason,
        "at": iso(c.created_at),
        "undone": c.undone_at is not None,
    }
