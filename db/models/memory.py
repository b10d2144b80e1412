"""Layered memories, their change history and extraction progress."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Index,
    Integer,
    String,
    Text,
    false,
)
from sqlalchemy.orm import Mapped, mapped_column

from db.models.base import Base, Embedding, new_id, utcnow


class Memory(Base):
    """One remembered item of a user, in one layer (long | mid | short | session).

    `id` is the integer rowid that the FTS5 (`memories_fts`) and vec0 (`memories_vec`, bit vectors) tables
    key on; `public_id` is the id the model sees. A superseded row is kept with `superseded_by` set.
    """

    __tablename__ = "memories"
    __table_args__ = (
        Index("ix_memories_user_layer_time", "user_id", "layer", "created_at"),
        Index("ix_memories_user_updated", "user_id", "updated_at"),  # lists, newest first (the app, /memory)
        Index("ix_memories_user_session", "user_id", "session_id"),
        Index("ix_memories_expires", "expires_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    public_id: Mapped[str] = mapped_column(String(36), unique=True, default=new_id)
    user_id: Mapped[int] = mapped_column(BigInteger)
    layer: Mapped[str] = mapped_column(String(16))  # long | mid | short | session
    category: Mapped[str] = mapped_column(String(32))
    content: Mapped[str] = mapped_column(Text)
    certainty: Mapped[float | None] = mapped_column()
    session_id: Mapped[str | None] = mapped_column(String(36))  # set for the session layer only
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None] = mapped_column()
    superseded_by: Mapped[str | None] = mapped_column(String(36))  # public_id of the newer memory
    # Which embedder produced the row's vector; NULL when it has none (embedder down).
    embedder: Mapped[str | None] = mapped_column(String(128))
    # The full-precision vector (float32 little-endian), read only to re-score the candidates that the
    # binary-quantized copy in memories_vec found (migration 0004); deferred: row loads never carry it.
    # On PostgreSQL a pgvector column (migration 0004) that recall searches directly.
    embedding: Mapped[bytes | None] = mapped_column(Embedding(), deferred=True)
    # Where it came from: user | tool | model | extraction | summary (migration 0007).
    origin: Mapped[str] = mapped_column(String(16), default="model", server_default="model")
    # Stored in a turn that had read web or MCP content: it may carry a page's words, not the user's.
    untrusted: Mapped[bool] = mapped_column(default=False, server_default=false())
    said_at: Mapped[datetime | None] = mapped_column()  # when the user said it (extraction: message time)
    event_at: Mapped[datetime | None] = mapped_column()  # when it happened, when the text says
    # The conversation it came from (the turn it answers, the reply it got): in its keyword words and, cut,
    # in what its vector is made from (core_tools/memory/passage.py; migration 0027).
    context: Mapped[str | None] = mapped_column(Text)
    # Who said it, when not the user (a forwarded message's author, a person in a quoted conversation): in
    # its words and vector as "speaker: text", and a query naming them ranks it higher (migration 0032).
    speaker: Mapped[str | None] = mapped_column(String(64))


class MemoryChange(Base):
    """One change of a memory: its text before and after, why, by whom (judge | model | user | extraction).

    `snapshot` holds what undo needs to restore the row (its columns before a forget).
    """

    __tablename__ = "memory_history"
    __table_args__ = (
        Index("ix_memory_history_user", "user_id", "id"),
        Index("ix_memory_history_memory", "memory_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(BigInteger)
    memory_id: Mapped[str] = mapped_column(String(36))  # public id of the memory changed
    action: Mapped[str] = mapped_column(String(16))  # update | supersede | forget | undo
    old_text: Mapped[str | None] = mapped_column(Text)
    new_text: Mapped[str | None] = mapped_column(Text)
    related_id: Mapped[str | None] = mapped_column(String(36))  # supersede: the memory that replaced it
    reason: Mapped[str | None] = mapped_column(Text)
    actor: Mapped[str] = mapped_column(String(16))
    snapshot: Mapped[dict[str, Any] | None] = mapped_column()
    undone_at: Mapped[datetime | None] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class MemoryExtraction(Base):
    """How far background extraction has read a session (the last message id it turned into memories)."""

    __tablename__ = "memory_extractions"

    session_id: Mapped[str] = mapped_column(String(36), primary_key=True)
    user_id: Mapped[int] = mapped_column(BigInteger)
    last_message_id: Mapped[int] = mapped_column(Integer)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
