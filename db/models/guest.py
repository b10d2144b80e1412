"""Questions asked as a guest or inline, kept for a short while (migration 0028): the "continue in private"
link (/start <token>) and an inline query's "ask" result carry only their token; the question and its asker
stay here, so any process on the database can answer them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from db.models.base import Base, utcnow


class GuestLink(Base):
    """One question waiting behind a token: `kind` "private" (a deep link into the private chat) or "inline"
    (an inline result to answer where it was posted); used once, until `expires_at`."""

    __tablename__ = "guest_links"
    __table_args__ = (Index("ix_guest_links_expires", "expires_at"),)

    token: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(16))
    question: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column()
    used_at: Mapped[datetime | None] = mapped_column()
