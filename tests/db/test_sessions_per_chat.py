"""Migration 0006 and the per-chat session queries on a real migrated SQLite file."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import Engine, inspect, text
from sqlalchemy.orm import Session, sessionmaker

from db.conversations import Conversations
from db.engine import make_engine
from db.migrate import downgrade, upgrade


def test_0006_makes_every_existing_session_the_private_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    upgrade(url, "0005")
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO users (id, created_at, last_seen_at) VALUES (7, '2026-01-01', '2026-01-01')")
        )
        # Before 0006 a session opened by a group message carried the group's id yet held private messages.
        for sid, chat in (("s-group", -100123), ("s-private", 7)):
            conn.execute(
                text(
                    "INSERT INTO sessions (id, user_id, chat_id, name, started_at, last_activity_at) "
                    "VALUES (:id, 7, :chat, 'old', '2026-01-01', '2026-01-01')"
                ),
                {"id": sid, "chat": chat},
            )
    upgrade(url)
    with engine.connect() as conn:
        rows = conn.execute(text("SELECT id, chat_id, chat_type FROM sessions ORDER BY id")).all()
    assert [tuple(r) for r in rows] == [("s-group", 7, "private"), ("s-private", 7, "private")]
    indexes = {i["name"]: i["column_names"] for i in inspect(engine).get_indexes("sessions")}
    assert indexes["ix_sessions_user_chat_open"] == ["user_id", "chat_id", "ended_at"]
    downgrade(url, "0005")
    assert "chat_type" not in {c["name"] for c in inspect(engine).get_columns("sessions")}
    engine.dispose()


def test_open_session_and_summary_per_chat(db_sessions: sessionmaker[Session], engine: Engine) -> None:
    conv = Conversations(db_sessions, engine)
    private = conv.current_session(7, 7, chat_type="private")
    group = conv.current_session(7, -100123, chat_type="supergroup")
    assert private.id != group.id and (private.chat_type, group.chat_type) == ("private", "supergroup")
    assert conv.current_session(7, 7).id == private.id and conv.current_session(7, -100123).id == group.id
    assert conv.current_session(7, -5).chat_type == "group"  # unknown type: private only for the user's id
    conv.end_session(private.id, "private summary")
    conv.end_session(group.id, "group summary")
    assert conv.last_summary(7) == (private.name, "private summary")
    assert conv.last_summary(7, -100123) == (group.name, "group summary")
    assert conv.session_chat(group.id) == (7, -100123)
