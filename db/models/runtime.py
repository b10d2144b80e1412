"""The turn runtime's tables: the inbox, the processes (replicas), chat and job leases, updates seen."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.orm import Mapped, mapped_column

from db.models.base import Base, utcnow


class InboxMessage(Base):
    """A user message that arrived and waits for its chat's turn (migration 0009).

    Stored the moment it arrives, so a restart during the debounce or while another turn runs loses
    nothing; kept apart from `messages` so no history query sees it before its turn, when it moves into
    `messages` (new ids: after the previous turn's rows) in the same transaction that deletes it here."""

    __tablename__ = "inbox"
    __table_args__ = (Index("ix_inbox_chat", "chat_id", "id"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(BigInteger)
    chat_id: Mapped[int] = mapped_column(BigInteger)
    chat_type: Mapped[str] = mapped_column(String(16))
    first_name: Mapped[str | None] = mapped_column(String(255))
    username: Mapped[str | None] = mapped_column(String(255))
    content: Mapped[str] = mapped_column(Text)
    tg_message_id: Mapped[int | None] = mapped_column(BigInteger)
    received_at: Mapped[datetime] = mapped_column(default=utcnow)
    # A voice note, photo or file (migration 0013): {"ids": media rows, "heard": transcript, "speak": bool}.
    media: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    # Migration 0014: the Telegram update it came in (a chat's queue is in update order: two processes can
    # store two quick messages out of order); a /retry or an edit waits here too, with what it re-runs.
    update_id: Mapped[int | None] = mapped_column(BigInteger)
    rerun_of: Mapped[int | None] = mapped_column(Integer)
    reply_to: Mapped[int | None] = mapped_column(BigInteger)


class Replica(Base):
    """A running bot process (migration 0014); dead once its heartbeat is older than REPLICA_LEASE_S."""

    __tablename__ = "replicas"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    # Where `pid` means something: boot id, pid namespace and hostname (bot/runtime/replica.py, pid_space).
    host: Mapped[str] = mapped_column(String(255))
    pid: Mapped[int] = mapped_column(Integer)
    pid_start: Mapped[str] = mapped_column(String(32))  # when that pid started (a reused pid is another)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    heartbeat_at: Mapped[datetime] = mapped_column(default=utcnow)


class ChatLease(Base):
    """Which process drives a chat, the turn it runs and a /stop asked for it (migration 0014)."""

    __tablename__ = "chat_leases"
    __table_args__ = (Index("ix_chat_leases_holder", "holder"),)

    chat_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    holder: Mapped[str] = mapped_column(String(64))
    since: Mapped[datetime] = mapped_column(default=utcnow)
    turn: Mapped[int | None] = mapped_column(BigInteger)
    turn_owner: Mapped[int | None] = mapped_column(BigInteger)
    stop: Mapped[int | None] = mapped_column(BigInteger)


class JobLease(Base):
    """Which process runs a periodic job (migration 0014)."""

    __tablename__ = "job_leases"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    holder: Mapped[str] = mapped_column(String(64))
    since: Mapped[datetime] = mapped_column(default=utcnow)


class UpdateSeen(Base):
    """A Telegram update already handled (migration 0014; per bot since 0017): a second delivery of it
    within the dedup window is dropped. `bot_id` is the numeric id in the bot's token, never the token."""

    __tablename__ = "updates_seen"
    __table_args__ = (Index("ix_updates_seen_at", "seen_at"),)

    bot_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    update_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    seen_at: Mapped[datetime] = mapped_column(default=utcnow)
