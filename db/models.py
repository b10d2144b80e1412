"""SQLAlchemy typed models. The schema changes only through Alembic migrations in migrations/."""

from __future__ import annotations

import struct
import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    false,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    """Now, timezone-aware UTC."""
    return datetime.now(UTC)


def new_id() -> str:
    """A new random UUID as text."""
    return str(uuid.uuid4())


class UTCDateTime(TypeDecorator[datetime]):
    """Stores naive UTC, returns aware UTC: SQLite keeps no time zone."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


class Embedding(TypeDecorator[bytes]):
    """A vector as float32 little-endian bytes in Python: a BLOB on SQLite, a pgvector `vector` on PostgreSQL.

    Every caller reads and writes bytes (db.memory_vectors.f32), so the write path is the same on both
    databases.
    """

    impl = LargeBinary
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name == "postgresql":
            from pgvector.sqlalchemy import VECTOR  # imported here: SQLite users need no pgvector

            return dialect.type_descriptor(VECTOR())
        return dialect.type_descriptor(LargeBinary())

    def process_bind_param(self, value: bytes | None, dialect: Dialect) -> Any:
        if value is None or dialect.name != "postgresql":
            return value
        return list(struct.unpack(f"<{len(value) // 4}f", value))

    def process_result_value(self, value: Any, dialect: Dialect) -> bytes | None:
        if value is None or dialect.name != "postgresql":
            return None if value is None else bytes(value)
        return struct.pack(f"<{len(value)}f", *(float(x) for x in value))


class Base(DeclarativeBase):
    """Declarative base of every table."""

    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        dict[str, Any]: JSON,
        list[Any]: JSON,
    }


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
    tool_calls: Mapped[list[Any] | None] = mapped_column(JSON)
    tool_call_id: Mapped[str | None] = mapped_column(String(128))
    tool_name: Mapped[str | None] = mapped_column(String(64))
    # user messages: pending -> answered | failed | interrupted | refused | stopped; others: done, or
    # stopped (a partial answer) and superseded (replaced by /retry or an edit: kept, not in the history)
    status: Mapped[str] = mapped_column(String(16), default="done")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # The Telegram id of a user message (to find it when it is edited or replied to); migration 0009.
    tg_message_id: Mapped[int | None] = mapped_column(BigInteger)
    edited_at: Mapped[datetime | None] = mapped_column()


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


class Approval(Base):
    """A tool call waiting for (or given) its user's approval (migration 0022): the waiting turn reads its
    status, whichever process the button press reached writes it."""

    __tablename__ = "approvals"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    chat_id: Mapped[int] = mapped_column(BigInteger)
    user_id: Mapped[int] = mapped_column(BigInteger)  # the one person who may decide
    tool: Mapped[str] = mapped_column(String(200))
    summary: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16))  # pending|approved|denied|timeout|cancelled
    decided_by: Mapped[int | None] = mapped_column(BigInteger)
    decided_at: Mapped[datetime | None] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApprovalAlways(Base):
    """A tool a chat allowed with "Always in this chat" (migration 0022)."""

    __tablename__ = "approval_always"

    chat_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    tool: Mapped[str] = mapped_column(String(200), primary_key=True)
    allowed_by: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class LLMCall(Base):
    """One request to the LLM endpoint, successful or not."""

    __tablename__ = "llm_calls"
    __table_args__ = (
        Index("ix_llm_calls_user_time", "user_id", "created_at"),
        Index("ix_llm_calls_schedule_time", "schedule_id", "created_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int | None] = mapped_column(BigInteger)
    session_id: Mapped[str | None] = mapped_column(String(36))
    purpose: Mapped[str] = mapped_column(String(32))  # chat | final | code_generate | summary | embedding
    model: Mapped[str] = mapped_column(String(128))
    prompt_tokens: Mapped[int] = mapped_column(Integer, default=0)
    completion_tokens: Mapped[int] = mapped_column(Integer, default=0)
    cached_tokens: Mapped[int] = mapped_column(Integer, default=0)
    tokens_estimated: Mapped[bool] = mapped_column(default=False)
    duration_ms: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Seconds of audio of a transcription call (priced per minute); 0 for every other call.
    audio_seconds: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    # The scheduled task run the call was made for (0019), NULL for every other call (db/attribution.py).
    schedule_id: Mapped[int | None] = mapped_column(Integer)
    firing_id: Mapped[int | None] = mapped_column(Integer)


class TurnInfo(Base):
    """What went into one answered turn, for its "why this answer" view (migration 0021): the memories
    recalled into it (prompt or memory tool), the tools it called, its model, LLM requests, tokens, cost
    and duration.

    Keyed by the answer it describes and deleted with it, or with the turn's user message (ON DELETE
    CASCADE on both): it lives exactly as long as the turn's messages."""

    __tablename__ = "turn_info"
    __table_args__ = (Index("ix_turn_info_user_message", "user_message_id"),)

    answer_id: Mapped[int] = mapped_column(
        Integer, ForeignKey("messages.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    user_message_id: Mapped[int] = mapped_column(Integer, ForeignKey("messages.id", ondelete="CASCADE"))
    user_id: Mapped[int] = mapped_column(BigInteger)
    chat_id: Mapped[int] = mapped_column(BigInteger)
    model: Mapped[str] = mapped_column(String(255))
    api_calls: Mapped[int] = mapped_column(Integer)
    tool_calls: Mapped[int] = mapped_column(Integer)
    duration_ms: Mapped[int] = mapped_column(Integer)
    prompt_tokens: Mapped[int] = mapped_column(Integer)
    completion_tokens: Mapped[int] = mapped_column(Integer)
    cached_tokens: Mapped[int] = mapped_column(Integer)
    tokens_estimated: Mapped[bool] = mapped_column()
    cost_usd: Mapped[float | None] = mapped_column()  # NULL: a model without a price
    memories: Mapped[list[Any]] = mapped_column(JSON)  # [{"id", "content"}], as recalled into the turn
    tools: Mapped[list[Any]] = mapped_column(JSON)  # [{"name", "arguments", "ok"}], in call order
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ToolCallLog(Base):
    """One tool call that passed the registry's choke point."""

    __tablename__ = "tool_calls"
    __table_args__ = (Index("ix_tool_calls_user_time", "user_id", "created_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int | None] = mapped_column(BigInteger)
    session_id: Mapped[str | None] = mapped_column(String(36))
    call_id: Mapped[str] = mapped_column(String(128))
    tool: Mapped[str] = mapped_column(String(64))
    arguments: Mapped[str] = mapped_column(Text)
    ok: Mapped[bool] = mapped_column()
    result: Mapped[str] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    duration_ms: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class CodeExecution(Base):
    """Every code run (the spec's `code_executions`), plus language, user, isolation and output sizes."""

    __tablename__ = "code_executions"
    __table_args__ = (
        Index("ix_code_executions_user_time", "user_id", "created_at"),
        Index("ix_code_executions_session", "session_id"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True, default=new_id)
    code: Mapped[str] = mapped_column(Text)
    stdout: Mapped[str | None] = mapped_column(Text)
    stderr: Mapped[str | None] = mapped_column(Text)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    duration_ms: Mapped[int | None] = mapped_column(Integer)
    success: Mapped[bool] = mapped_column()
    session_id: Mapped[str | None] = mapped_column(String(36))
    trigger_message: Mapped[str | None] = mapped_column(Text)
    llm_reasoning: Mapped[str | None] = mapped_column(Text)
    error_category: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    language: Mapped[str] = mapped_column(String(32), default="python")
    user_id: Mapped[int | None] = mapped_column(BigInteger)
    isolation: Mapped[str] = mapped_column(String(32))
    stdout_bytes: Mapped[int] = mapped_column(Integer, default=0)
    stderr_bytes: Mapped[int] = mapped_column(Integer, default=0)
    truncated: Mapped[bool] = mapped_column(default=False)
    # [{"name", "size"}] of the files the run wrote under out/ (sent to the chat), or None
    files_out: Mapped[list[Any] | None] = mapped_column(JSON)


class MediaFile(Base):
    """One file a user sent: voice, audio, photo or document; the bytes live hash-named under MEDIA_DIR."""

    __tablename__ = "media_files"
    __table_args__ = (
        Index("ix_media_files_session", "session_id", "id"),
        Index("ix_media_files_message", "message_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(BigInteger)
    chat_id: Mapped[int] = mapped_column(BigInteger)
    session_id: Mapped[str | None] = mapped_column(String(36))
    message_id: Mapped[int | None] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))  # voice | audio | video_note | photo | image | document
    file_name: Mapped[str] = mapped_column(String(255))
    mime_type: Mapped[str | None] = mapped_column(String(128))
    size: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    sha256: Mapped[str | None] = mapped_column(String(64))  # None when the bytes could not be fetched
    duration_s: Mapped[int | None] = mapped_column(Integer)
    text_chars: Mapped[int | None] = mapped_column(Integer)  # extracted text of a document
    status: Mapped[str] = mapped_column(String(16))
    detail: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


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


class Budget(Base):
    """A per-user usage cap set by the owner; overrides the default of its period and kind.

    `limit_value` is USD for kind "cost" and tokens for kind "tokens"; NULL means "no cap" (an explicit
    override of a default). No row means the default from the settings applies.
    """

    __tablename__ = "budgets"
    __table_args__ = (UniqueConstraint("user_id", "period", "kind", name="uq_budgets_user_period_kind"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(BigInteger)
    period: Mapped[str] = mapped_column(String(16))  # daily | monthly
    kind: Mapped[str] = mapped_column(String(16))  # cost | tokens
    limit_value: Mapped[float | None] = mapped_column()
    set_by: Mapped[int | None] = mapped_column(BigInteger)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class BudgetNotice(Base):
    """The owner was told that a user hit a cap in one period window (so they are told only once)."""

    __tablename__ = "budget_notices"
    __table_args__ = (
        UniqueConstraint("user_id", "period", "kind", "window_start", name="uq_budget_notices_window"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(BigInteger)
    period: Mapped[str] = mapped_column(String(16))
    kind: Mapped[str] = mapped_column(String(16))
    window_start: Mapped[datetime] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class TurnEvent(Base):
    """A turn or job cut short: loop protection (chain_limit, repeat_guard), a mid-turn budget stop
    ("budget") or a request refused before it was sent ("refused", `detail` says which purpose and cap)."""

    __tablename__ = "turn_events"
    __table_args__ = (Index("ix_turn_events_user_time", "user_id", "created_at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int | None] = mapped_column(BigInteger)
    session_id: Mapped[str | None] = mapped_column(String(36))
    kind: Mapped[str] = mapped_column(String(32))
    detail: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Schedule(Base):
    """A reminder (`kind` message) or scheduled task (`kind` task) of a user, delivered to one chat.

    `start_local` is the first wall-clock time (ISO, no offset) in `timezone`, or in the user's current zone
    when `timezone` is NULL (a later /timezone moves it); `next_fire_at` is the next occurrence in UTC,
    computed with `zone_used`. `fired_count` counts occurrences consumed (missed ones too) against `count`.
    """

    __tablename__ = "schedules"
    __table_args__ = (
        Index("ix_schedules_status_next", "status", "next_fire_at"),
        Index("ix_schedules_user_status", "user_id", "status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    user_id: Mapped[int] = mapped_column(BigInteger)
    chat_id: Mapped[int] = mapped_column(BigInteger)
    chat_type: Mapped[str] = mapped_column(String(16), default="private")
    kind: Mapped[str] = mapped_column(String(8))  # message | task
    text: Mapped[str] = mapped_column(Text)
    start_local: Mapped[str] = mapped_column(String(32))
    timezone: Mapped[str | None] = mapped_column(String(64))
    zone_used: Mapped[str] = mapped_column(String(64))
    repeat: Mapped[str | None] = mapped_column(Text)  # an RRULE (without COUNT/UNTIL) or a 5-field cron
    repeat_kind: Mapped[str | None] = mapped_column(String(8))  # rrule | cron
    until_at: Mapped[datetime | None] = mapped_column()
    count: Mapped[int | None] = mapped_column(Integer)
    fired_count: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String(16), default="active")  # active | paused | done | cancelled
    pause_reason: Mapped[str | None] = mapped_column(String(32))  # blocked | failures | cost
    failures: Mapped[int] = mapped_column(Integer, default=0)  # consecutive failed task firings
    next_fire_at: Mapped[datetime | None] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    max_cost_per_month: Mapped[float | None] = mapped_column()  # USD a task may spend a month (0019)


class ScheduleFiring(Base):
    """One delivery of a schedule: due -> sending -> sent (with the message id) | failed (with the error).

    `not_before` is when it may be (re)tried; `missed` counts occurrences folded into it after downtime;
    `resend` marks one that was being sent when the bot stopped; `ack` is the user's done/snoozed.
    """

    __tablename__ = "schedule_firings"
    __table_args__ = (
        Index("ix_schedule_firings_status_time", "status", "not_before"),
        Index("ix_schedule_firings_schedule", "schedule_id"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    schedule_id: Mapped[int] = mapped_column(Integer, ForeignKey("schedules.id", ondelete="CASCADE"))
    user_id: Mapped[int] = mapped_column(BigInteger)
    chat_id: Mapped[int] = mapped_column(BigInteger)
    due_at: Mapped[datetime] = mapped_column()
    not_before: Mapped[datetime] = mapped_column()
    status: Mapped[str] = mapped_column(String(16), default="due")  # due|sending|sent|failed|cancelled
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    missed: Mapped[int] = mapped_column(Integer, default=0)
    snoozed: Mapped[bool] = mapped_column(Boolean, default=False)
    resend: Mapped[bool] = mapped_column(Boolean, default=False)
    result_text: Mapped[str | None] = mapped_column(Text)
    message_id: Mapped[int | None] = mapped_column(BigInteger)
    error: Mapped[str | None] = mapped_column(Text)
    ack: Mapped[str | None] = mapped_column(String(16))  # done | snoozed
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column()


class StoredResult(Base):
    """A tool result too long for one page: the model reads it with `read_result` by its handle (0011).

    Owned by the user whose call produced it; gone when its session ends."""

    __tablename__ = "tool_results"
    __table_args__ = (Index("ix_tool_results_session", "session_id"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    user_id: Mapped[int] = mapped_column(BigInteger)
    session_id: Mapped[str] = mapped_column(String(36))
    tool: Mapped[str] = mapped_column(String(128))
    call_id: Mapped[str] = mapped_column(String(128))
    content: Mapped[str] = mapped_column(Text)
    chars: Mapped[int] = mapped_column(Integer)
    # The result came from outside (web, MCP server): every page read later carries the untrusted mark.
    untrusted: Mapped[bool] = mapped_column(default=False, server_default=false())
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class CodeJob(Base):
    """A background `generate` job (0011): its state survives a restart."""

    __tablename__ = "code_jobs"
    __table_args__ = (Index("ix_code_jobs_user_status", "user_id", "status"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    user_id: Mapped[int] = mapped_column(BigInteger)
    chat_id: Mapped[int] = mapped_column(BigInteger)
    session_id: Mapped[str | None] = mapped_column(String(36))
    task: Mapped[str] = mapped_column(Text)
    language: Mapped[str] = mapped_column(String(32), default="python")
    # running | done | failed | cancelled | interrupted (the process ended while it ran)
    status: Mapped[str] = mapped_column(String(16), default="running")
    # "host:pid" of the process running it: a restart finds its predecessor's jobs by this.
    runner: Mapped[str] = mapped_column(String(128), default="")
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None] = mapped_column()
