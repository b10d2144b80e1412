"""Real databases filled with a little of everything, and their media files, for the backup tests."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from sqlalchemy import Engine, func, select

from core_tools.memory.store import MemoryStore
from db.engine import make_sessionmaker
from db.models import ChatSession, MediaFile, Message, Schedule, User
from tests.support.embedders import TinyEmbedder


def store_file(media_dir: Path, data: bytes) -> str:
    """Store bytes as MEDIA_DIR does (hash-named); their SHA-256."""
    sha = hashlib.sha256(data).hexdigest()
    path = media_dir / sha[:2] / sha
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return sha


async def fill(
    engine: Engine, media_dir: Path, user_id: int, *, messages: int = 6, file_bytes: int = 3000
) -> str:
    """A user with a session, messages, memories (with vectors), a schedule and a file; the file's hash."""
    sm = make_sessionmaker(engine)
    data = os.urandom(file_bytes)
    sha = store_file(media_dir, data)
    with sm.begin() as s:
        if s.get(User, user_id) is None:
            s.add(User(id=user_id, first_name="Ann", timezone="Europe/Berlin"))
            s.flush()
        session = ChatSession(user_id=user_id, chat_id=user_id, name="main")
        s.add(session)
        s.flush()
        for n in range(messages):
            role = "user" if n % 2 == 0 else "assistant"
            s.add(
                Message(
                    session_id=session.id,
                    user_id=user_id,
                    chat_id=user_id,
                    role=role,
                    content=f"{role} {n} of {user_id}",
                )
            )
        s.add(
            MediaFile(
                user_id=user_id,
                chat_id=user_id,
                kind="document",
                file_name="notes.bin",
                size=len(data),
                sha256=sha,
                status="received",
            )
        )
        s.add(
            Schedule(
                user_id=user_id,
                chat_id=user_id,
                kind="message",
                text="Water the plants",
                start_local="2026-03-01T09:00",
                zone_used="UTC",
            )
        )
    store = MemoryStore(sm, engine, TinyEmbedder())
    await store.reembed()
    await store.store(user_id, "long", f"User {user_id} has a beagle named Max")
    await store.store(user_id, "long", f"User {user_id} lives in Toronto")
    return sha


def counts(engine: Engine) -> dict[str, int]:
    """Rows per data table."""
    from db.snapshot import table_counts

    with engine.connect() as conn:
        return table_counts(conn)


def message_texts(engine: Engine) -> list[str]:
    """Every message's text, in id order."""
    with engine.connect() as conn:
        return [str(t) for t in conn.execute(select(Message.content).order_by(Message.id)).scalars()]


def memory_count(engine: Engine) -> int:
    """How many memories there are."""
    from db.models import Memory

    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(Memory)).scalar_one())
