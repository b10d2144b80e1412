"""Users, their sessions (conversations), the messages of a session, forum topics and per-chat settings."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from db.models.base import Base, new_id, utcnow


class User(Base):
    """A Telegram user who talked to the bot (or the local terminal user)."""

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    first_name: Mapped[str | None] = mapped_column(String(255))
    username: Mapped[str | None] = mapped_column(String(255))
    timezone: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)


class ChatSession(Base):
    """A slice of one user's conversation in one chat; `ended_at` is set when it is archived.

    A user has one open session per chat (migration 0006): a group never sees the private conversation.
    """

    __tablename__ = "sessions"
    __table_args__ = (Index("ix_sessions_user_chat_open", "user_id", "chat_id", "ended_at"),)

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    user_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("users.id", ondelete="CASCADE"))
    chat_id: Mapped[int] = mapped_column(BigInteger)
    # private | group | supergroup | channel: private memories and summaries stay out of shared chats.
    chat_type: Mapped[str] = mapped_column(String(16), server_default="private")
    name: Mapped[str] = mapped_column(String(255))
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_activity_at: Mapped[datetime] = mapped_column(default=utcnow)
    ended_at: Mapped[datetime | None] = mapped_column()
    summary: Mapped[str | None] = mapped_column(Text)
    # Raised by the database for every change to the session's messages (migration 0023's triggers): a
    # process reads a history again only when it moved by more than its own writes (db/history_cache.py).
    history_rev: Mapped[int] = mapped_column(BigInteger, server_default="0")


class Message(Base):
    """One message of a session: user text, assistant text and tool calls, or a tool result."""

    __tablename__ = "messages"
    __table_args__ = (
        Index("ix_messages_session", "session_id", "id"),
        Index("ix_messages_status", "status"),
        Index("ix_messages_chat_tg", "chat_id", "tg_message_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(String(36), ForeignKey("sessions.id", ondelete="CASCADE"))
    user_id: Mapped[int] = mapped_column(BigInteger)
    chat_id: Mapped[int] = mapped_column(BigInteger)
    role: Mapped[str] = mapped_column(String(16))  # user | assistant | tool
    content: Mapped[str | None] = mapped_column(Text)
    # assistant: [{"id", "name", "arguments"}]; tool: the id of the call it answers
    # SQL NULL for a message without calls (most of them), not the JSON text "null" that every history read
    # would decode again.
    tool_calls: Mapped[list[Any] | None] = mapped_column(JSON(none_as_null=True))
    tool_call_id: Mapped[str | None] = mapped_column(String(128))
    tool_name: Mapped[str | None] = mapped_column(String(64))
    # user messages: pending -> answered | failed | interrupted | refused | stopped; others: done, or
    # stopped (a partial answer) and superseded (replaced by /retry or an edit: kept, not in the history)
    status: Mapped[str] = mapped_column(String(16), default="done")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The Telegram id of a user message (to find it when it is edited or replied to); migration 0009.
    tg_message_id: Mapped[int | None] = mapped_column(BigInteger)
    edited_at: Mapped[datetime | None] = mapped_column()


class ForumTopic(Base):
    """A topic of a forum supergroup that has talked to the bot (migration 0016).

    A topic is a conversation of its own: its session, queue (inbox), lease, schedules and files are kept
    under a conversation key in the `chat_id` columns of those tables. That key is the chat id for every
    chat that is not a forum topic (private chats, groups, a forum's General topic), and
    `-(2**53 + id)` for a topic: outside the range of Telegram ids, which have at most 52 significant bits.
    db/topics.py turns keys into (chat id, thread id) and back."""

    __tablename__ = "forum_topics"
    __table_args__ = (UniqueConstraint("chat_id", "thread_id", name="uq_forum_topics_chat_thread"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    chat_id: Mapped[int] = mapped_column(BigInteger)
    thread_id: Mapped[int] = mapped_column(BigInteger)  # Telegram's message_thread_id of the topic
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ChatSettings(Base):
    """What one chat chose (migration 0009): its model; NULL means the operator's default."""

    __tablename__ = "chat_settings"

    chat_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    model: Mapped[str | None] = mapped_column(String(128))
    updated_by: Mapped[int | None] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
