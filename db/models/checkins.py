"""Check-ins: a user's opt-in, its back-off and what the last one contained (core_tools/checkin/)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Boolean, ForeignKey, Integer, String, Text, false
from sqlalchemy.orm import Mapped, mapped_column

from db.models.base import Base, utcnow


class Checkin(Base):
    """One user's check-in: when (`cadence` daily | weekly, `weekday` 0 = Monday, `at_local` HH:MM in the
    user's zone), run by its schedule (`schedules` row of kind "checkin", which fires exactly once), whether
    it is an LLM digest, and its back-off.

    `level` is the back-off (0: as set; 1: every other day, or every other week; 2: weekly, or every four
    weeks); `ignored` counts check-ins in a row that got no press before the next one; `awaiting` marks the
    last sent one as not pressed and not yet counted. `last_items` is what the last sent one contained,
    each item with its state after presses (the app shows it; the buttons re-render it).
    """

    __tablename__ = "checkins"

    user_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    schedule_id: Mapped[int | None] = mapped_column(Integer, ForeignKey("schedules.id", ondelete="SET NULL"))
    enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    cadence: Mapped[str] = mapped_column(String(8))  # daily | weekly
    weekday: Mapped[int | None] = mapped_column(Integer)
    at_local: Mapped[str] = mapped_column(String(5))
    digest: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    level: Mapped[int] = mapped_column(Integer, default=0)
    ignored: Mapped[int] = mapped_column(Integer, default=0)
    awaiting: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    last_run_at: Mapped[datetime | None] = mapped_column()  # the last preflight, silent ones too
    last_sent_at: Mapped[datetime | None] = mapped_column()
    last_message_id: Mapped[int | None] = mapped_column(BigInteger)
    last_text: Mapped[str | None] = mapped_column(Text)
    last_items: Mapped[list[Any] | None] = mapped_column()
    last_cost: Mapped[float | None] = mapped_column()  # USD of the last digest
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
