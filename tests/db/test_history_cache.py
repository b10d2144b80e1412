"""A session's history kept between turns (db/history_cache.py): a turn sends what the database holds,
whoever changed it, and a turn's own writes do not make it read the history again."""

from __future__ import annotations

from sqlalchemy import Engine, delete, insert, update

from db.conversation_records import Answer, TurnClosing, TurnOpening
from db.conversations import Conversations
from db.engine import make_sessionmaker
from db.models import Message, utcnow
from db.speakers import Speaker
from tests.support.sql import statements

USER = 7


def _turn(conv: Conversations, text: str, answer: str) -> str:
    """One plain turn as the agent stores it; the session's id."""
    opened = conv.open_turn(TurnOpening(Speaker(USER, USER, "private"), texts=((text, None),)))
    conv.close_turn(
        TurnClosing(opened.session.id, USER, USER, tuple(opened.message_ids), "answered", Answer(answer))
    )
    return opened.session.id


def _seen(conv: Conversations, session_id: str) -> list[tuple[str, str | None, str]]:
    return [(m.role, m.content, m.status) for m in conv.messages(session_id)]


def _history_reads(seen: list[str]) -> list[str]:
    """The statements that read a history's rows."""
    return [s for s in seen if "FROM messages" in s and s.lstrip().upper().startswith("SELECT")]


def test_a_turns_own_writes_keep_its_history_without_reading_it_again(engine: Engine) -> None:
    conv = Conversations(make_sessionmaker(engine), engine)
    session = _turn(conv, "Plan my trip", "Where to?")
    assert _seen(conv, session) == [("user", "Plan my trip", "answered"), ("assistant", "Where to?", "done")]
    with statements(engine) as seen:
        _turn(conv, "Lisbon", "Lisbon it is.")
        _turn(conv, "In May", "May is lovely.")
        history = _seen(conv, session)
    assert _history_reads(seen) == []  # the two turns' own rows were applied to the history kept here
    assert history[-4:] == [
        ("user", "Lisbon", "answered"),
        ("assistant", "Lisbon it is.", "done"),
        ("user", "In May", "answered"),
        ("assistant", "May is lovely.", "done"),
    ]
    # A process that keeps nothing yet reads the same.
    fresh = Conversations(make_sessionmaker(engine), engine)
    assert _seen(fresh, session) == history


def test_what_another_process_changes_is_in_the_next_history(engine: Engine, other_engine: Engine) -> None:
    here = Conversations(make_sessionmaker(engine), engine)
    session = _turn(here, "My PIN is 1234", "Noted.")
    _turn(here, "What is the capital of Peru?", "Lima.")
    assert len(_seen(here, session)) == 4
    with other_engine.begin() as conn:  # an edit there
        conn.execute(
            update(Message).where(Message.content == "What is the capital of Peru?").values(content="Chile?")
        )
    assert ("user", "Chile?", "answered") in _seen(here, session)
    with other_engine.begin() as conn:  # the user's forgetting there
        conn.execute(delete(Message).where(Message.content.in_(["My PIN is 1234", "Noted."])))
    assert [m[1] for m in _seen(here, session)] == ["Chile?", "Lima."]
    with other_engine.begin() as conn:  # a message stored there
        row = {"session_id": session, "user_id": USER, "chat_id": USER, "role": "user"}
        conn.execute(
            insert(Message).values(**row, content="Sent elsewhere", status="done", created_at=utcnow())
        )
    assert [m[1] for m in _seen(here, session)] == ["Chile?", "Lima.", "Sent elsewhere"]


def test_a_change_between_a_turns_writes_is_not_lost(engine: Engine, other_engine: Engine) -> None:
    here = Conversations(make_sessionmaker(engine), engine)
    session = _turn(here, "Book a table for two", "Done, at 8.")
    _seen(here, session)  # kept here
    with other_engine.begin() as conn:  # edited elsewhere after this turn ended...
        conn.execute(
            update(Message).where(Message.content == "Book a table for two").values(content="For four")
        )
    _turn(here, "Thanks", "You're welcome.")  # ...before the next turn's own writes
    assert [m[1] for m in _seen(here, session)] == [
        "For four",
        "Done, at 8.",
        "Thanks",
        "You're welcome.",
    ]


def test_a_shorter_read_is_served_from_the_kept_history_and_leaves_it_whole(engine: Engine) -> None:
    conv = Conversations(make_sessionmaker(engine), engine)
    session = _turn(conv, "One", "1")
    _turn(conv, "Two", "2")
    assert len(_seen(conv, session)) == 4
    with statements(engine) as seen:
        assert [m.content for m in conv.messages(session, limit=1)] == ["2"]  # "is there a last message?"
        assert [m.content for m in conv.messages(session, limit=3)] == ["1", "Two", "2"]
        assert len(_seen(conv, session)) == 4
    assert _history_reads(seen) == []
