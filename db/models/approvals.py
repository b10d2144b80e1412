"""Approval requests before risky tool calls, and the "always in this chat" grants."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Integer,
    String,
    Text,
)
from sqlalchemy.orm import Mapped, mapped_column

from db.models.base import Base, utcnow


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
    """A tool a person allowed for their own calls in a chat with "Always in this chat" (migration 0022;
    per person since 0025: in a group, one member's choice does not let the others' calls run unasked)."""

    __tablename__ = "approval_always"

    chat_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    tool: Mapped[str] = mapped_column(String(200), primary_key=True)
    allowed_by: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)  # whose calls
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
