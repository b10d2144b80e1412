"""The checked upgrades of the database (bot/process/upgrade/, migration 0029)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from db.models.base import Base, UTCDateTime


class Upgrade(Base):
    """One upgrade that proved itself on a copy: the code versions and schema revisions before and after,
    when, and the backup taken first (what `python -m bot rollback` restores)."""

    __tablename__ = "upgrades"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    upgraded_at: Mapped[datetime] = mapped_column(UTCDateTime)
    from_version: Mapped[str | None] = mapped_column(String(100))  # the code that ran before, if recorded
    to_version: Mapped[str] = mapped_column(String(100))
    from_revision: Mapped[str | None] = mapped_column(String(40))
    to_revision: Mapped[str] = mapped_column(String(40))
    backup: Mapped[str | None] = mapped_column(String(255))  # the backup's name in BACKUP_DIR
    seconds: Mapped[float] = mapped_column()
