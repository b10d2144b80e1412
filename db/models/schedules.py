"""Reminders and scheduled tasks, and each of their firings."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.orm import Mapped, mapped_column

from db.models.base import Base, utcnow


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
