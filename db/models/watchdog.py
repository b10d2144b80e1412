"""The watchdog's events (bot/runtime/vigil/, migration 0031): each condition it noticed, in which process,
from when to when, and why."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from db.models.base import Base


class WatchdogEvent(Base):
    """A condition (`polling stalled`, `answers undelivered`...) a process noticed: `ended` is None while it
    lasts (or when the process died during it: the process's replica row says which)."""

    __tablename__ = "watchdog_events"
    __table_args__ = (Index("ix_watchdog_events_started", "started"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    condition: Mapped[str] = mapped_column(String(32))
    process: Mapped[str] = mapped_column(String(64))  # the replica id (bot/runtime/replica.py)
    started: Mapped[datetime] = mapped_column()
    ended: Mapped[datetime | None] = mapped_column()
    cause: Mapped[str] = mapped_column(Text)
