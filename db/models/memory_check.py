"""The memory self-check's last result per user (core_tools/memory/selfcheck.py, migration 0026)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Integer, false
from sqlalchemy.orm import Mapped, mapped_column

from db.models.base import Base


class MemoryCheck(Base):
    """How many of a user's current memories recall found by a short cue at the last check, what the check
    repaired, what it cost, and whether the owner was told of the current fall below the threshold."""

    __tablename__ = "memory_checks"

    user_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    checked_at: Mapped[datetime] = mapped_column()
    memories: Mapped[int] = mapped_column(Integer)  # current memories asked for
    findable: Mapped[int] = mapped_column(Integer)  # of those, found in the top 5
    repaired_vectors: Mapped[int] = mapped_column(Integer)
    repaired_words: Mapped[int] = mapped_column(Integer)
    seconds: Mapped[float] = mapped_column()
    # Set when the owner was told the figure is below the threshold; cleared when it is back above.
    told_below: Mapped[bool] = mapped_column(default=False, server_default=false())
