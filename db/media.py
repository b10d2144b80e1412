"""Rows of `media_files`: one per file a user sent (the bytes live hash-named under MEDIA_DIR)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, Table, bindparam, insert, select, update
from sqlalchemy.orm import Session, sessionmaker

from db import connections
from db.engine import engine_for
from db.models import MediaFile, utcnow
from db.prepared import Prepared
from db.rows import columns_for

_TABLE: Table = MediaFile.__table__  # type: ignore[assignment]
_INSERT = insert(_TABLE)  # built once


@dataclass(frozen=True)
class MediaRow:
    """A media_files row as plain data."""

    id: int
    user_id: int
    chat_id: int
    session_id: str | None
    message_id: int | None
    kind: str
    file_name: str
    mime_type: str | None
    size: int
    sha256: str | None
    duration_s: int | None
    text_chars: int | None
    status: str
    detail: str | None
    created_at: datetime | None = None


@dataclass(frozen=True, kw_only=True)  # by name: kind, file_name, mime_type and status are all strings
class NewMediaFile:
    """A file a user sent, as a row to store (not yet linked to a message).

    `size` and `sha256` are the stored bytes' (core_tools.media fills them in); a file kept without its bytes
    (too big, not downloaded) has only the size Telegram announced and no hash.
    """

    user_id: int
    chat_id: int
    kind: str
    file_name: str
    mime_type: str | None
    status: str
    size: int = 0
    sha256: str | None = None
    duration_s: int | None = None
    text_chars: int | None = None
    detail: str | None = None


# Every turn looks for the images of its history's messages (one session's): built once, MediaRow(*row).
_FOR_MESSAGES = (
    select(*columns_for(_TABLE, MediaRow, leave=("created_at",)))
    .where(_TABLE.c.session_id == bindparam("sid"), _TABLE.c.message_id >= bindparam("first"))
    .order_by(_TABLE.c.id)
)
_FOR_MESSAGES_RUN = Prepared(_FOR_MESSAGES)


def _row(m: MediaFile) -> MediaRow:
    return MediaRow(
        m.id,
        m.user_id,
        m.chat_id,
        m.session_id,
        m.message_id,
        m.kind,
        m.file_name,
        m.mime_type,
        m.size,
        m.sha256,
        m.duration_s,
        m.text_chars,
        m.status,
        m.detail,
        m.created_at,
    )


class MediaFiles:
    """Writes and reads `media_files`."""

    def __init__(self, sessions: sessionmaker[Session], engine: Engine) -> None:
        self._sm = sessions
        # Core statements for the writes: they run on the event loop in the middle of a voice turn.
        self._engine = engine_for(sessions, engine)

    def add(self, f: NewMediaFile) -> int:
        """Store a row (not yet linked to a message); returns its id."""
        values = {
            "user_id": f.user_id,
            "chat_id": f.chat_id,
            "session_id": None,
            "message_id": None,
            "kind": f.kind,
            "file_name": f.file_name[:255],
            "mime_type": (f.mime_type or None) and f.mime_type[:128],
            "size": f.size,
            "sha256": f.sha256,
            "status": f.status,
            "duration_s": f.duration_s,
            "text_chars": f.text_chars,
            "detail": f.detail,
            "created_at": utcnow(),
        }
        with self._engine.begin() as conn:
            key = conn.execute(_INSERT, values).inserted_primary_key
            assert key is not None
            return int(key[0])

    def link(self, ids: Sequence[int], message_id: int, session_id: str) -> None:
        """Attach rows to the user message (and session) they came with."""
        if not ids:
            return
        with self._engine.begin() as conn:
            conn.execute(
                update(_TABLE)
                .where(_TABLE.c.id.in_(list(ids)))
                .values(message_id=message_id, session_id=session_id)
            )

    def set_status(
        self, file_id: int, status: str, detail: str | None = None, *, text_chars: int | None = None
    ) -> None:
        """Record what became of a file (transcribed, extracted and how much text, failed, ...)."""
        values: dict[str, object] = {"status": status, "detail": detail}
        if text_chars is not None:
            values["text_chars"] = text_chars
        with self._engine.begin() as conn:
            conn.execute(update(_TABLE).where(_TABLE.c.id == file_id).values(**values))

    def get(self, file_id: int) -> MediaRow | None:
        """One row by id."""
        with self._sm() as s:
            m = s.get(MediaFile, file_id)
            return None if m is None else _row(m)

    def for_session(self, session_id: str) -> list[MediaRow]:
        """Every file of a session, oldest first."""
        with self._sm() as s:
            q = select(MediaFile).where(MediaFile.session_id == session_id).order_by(MediaFile.id)
            return [_row(m) for m in s.scalars(q)]

    def of_user(self, user_id: int, limit: int) -> list[MediaRow]:
        """The files a user sent, newest first."""
        with self._sm() as s:
            q = (
                select(MediaFile)
                .where(MediaFile.user_id == user_id)
                .order_by(MediaFile.id.desc())
                .limit(limit)
            )
            return [_row(m) for m in s.scalars(q)]

    def for_messages(self, session_id: str, message_ids: Sequence[int]) -> list[MediaRow]:
        """The files of some messages of a session, oldest first (read by the session's index: a history's
        hundred message ids in an IN list cost more than the few files a session has)."""
        if not message_ids:
            return []
        wanted = set(message_ids)
        with connections.read(self._engine) as conn:
            rows = _FOR_MESSAGES_RUN.rows(conn, {"sid": session_id, "first": min(wanted)})
        return [m for m in (MediaRow(*r) for r in rows) if m.message_id in wanted]
