"""The code tool: every sandbox run, the durable generate jobs, and stored tool results (read_result)."""

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
    false,
)
from sqlalchemy.orm import Mapped, mapped_column

from db.models.base import Base, new_id, utcnow


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
