"""What turns and requests cost: the LLM-call log, each answer's record, tool calls, caps, notices, events."""

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

from db.models.base import Base, utcnow


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
