"""Users' files: one row per stored file."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Index,
    Integer,
    String,
    Text,
)
from sqlalchemy.orm import Mapped, mapped_column

from db.models.base import Base, utcnow


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
