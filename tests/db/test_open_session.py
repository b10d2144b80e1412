"""A chat's open session as a turn finds it (db/conversations.py, open_turn): taken from what this process
saw last and checked as the turn marks it active, so a session another process ended or erased is never
written to again."""

from __future__ import annotations

from sqlalchemy import Engine, delete, select

from db.conversation_records import Answer, TurnClosing, TurnOpening
from db.conversations import Conversations
from db.engine import make_sessionmaker
from db.models import ChatSession, Message
from db.speakers import Speaker
from tests.support.sql import statements

USER = 7
GROUP = -100


def _turn(conv: Conversations, text: str, user: int = USER, chat: int = USER, kind: str = "private") -> str:
    """One plain turn as the agent stores it; the session's id."""
    opened = conv.open_turn(TurnOpening(Speaker(user, chat, kind), texts=((text, None),)))
    conv.close_turn(
        TurnClosing(opened.session.id, user, chat, tuple(opened.message_ids), "answered", Answer("ok"))
    )
    return opened.session.id


def _texts(engine: Engine, session_id: str) -> list[str | None]:
    with engine.connect() as conn:
        rows = conn.execute(
            select(Message.content).where(Message.session_id == session_id, Message.role == "user")
        )
        return [r[0] for r in rows]


def test_a_returning_chat_finds_its_session_without_looking_it_up(engine: Engine) -> None:
    conv = Conversations(make_sessionmaker(engine), engine)
    first = _turn(conv, "Hello")
    with statements(engine) as seen:
        second = _turn(conv, "Still there?")
    assert second == first
    assert not [s for s in seen if s.lstrip().upper().startswith("SELECT") and "FROM sessions" in s]
    assert _texts(engine, first) == ["Hello", "Still there?"]
    assert [m.content for m in conv.messages(first)] == ["Hello", "ok", "Still there?", "ok"]


def test_a_session_another_process_ended_gets_no_more_messages(engine: Engine, other_engine: Engine) -> None:
    here = Conversations(make_sessionmaker(engine), engine)
    there = Conversations(make_sessionmaker(other_engine), other_engine)
    old = _turn(here, "Plan my trip")
    there.end_session(old, summary="A trip.")
    new = there.start_session(USER, USER, chat_type="private").id
    assert _turn(here, "To Lisbon") == new
    assert _texts(engine, old) == ["Plan my trip"]
    assert _texts(engine, new) == ["To Lisbon"]
    assert [m.content for m in here.messages(new)] == ["To Lisbon", "ok"]


def test_a_session_another_process_erased_is_opened_anew(engine: Engine, other_engine: Engine) -> None:
    here = Conversations(make_sessionmaker(engine), engine)
    old = _turn(here, "My PIN is 1234")
    with other_engine.begin() as conn:  # the user's erase there
        conn.execute(delete(Message).where(Message.session_id == old))
        conn.execute(delete(ChatSession).where(ChatSession.id == old))
    new = _turn(here, "Hello again")
    assert new != old
    assert [m.content for m in here.messages(new)] == ["Hello again", "ok"]


def test_a_group_keeps_one_session_whoever_speaks(engine: Engine) -> None:
    conv = Conversations(make_sessionmaker(engine), engine)
    first = _turn(conv, "Lunch at noon?", user=USER, chat=GROUP, kind="group")
    assert _turn(conv, "Yes", user=USER + 1, chat=GROUP, kind="group") == first
    assert _turn(conv, "Private question", user=USER + 1, chat=USER + 1) != first
    assert _texts(engine, first) == ["Lunch at noon?", "Yes"]


def test_a_newer_open_session_another_process_started_is_the_one_written_to(
    engine: Engine, other_engine: Engine
) -> None:
    # Two first contacts racing (a turn and the app's session lookup, each finding none) leave two open
    # sessions of one chat: every process must take the newest, as a fresh lookup does, or the
    # conversation splits in two, each process's turns seeing only their own half.
    here = Conversations(make_sessionmaker(engine), engine)
    there = Conversations(make_sessionmaker(other_engine), other_engine)
    older = _turn(here, "Plan my trip")
    newer = there.start_session(USER, USER, chat_type="private").id
    assert _turn(there, "To Lisbon") == newer
    assert _turn(here, "By train") == newer
    assert _texts(engine, newer) == ["To Lisbon", "By train"]
    assert [m.content for m in here.messages(newer)] == ["To Lisbon", "ok", "By train", "ok"]
    assert _texts(engine, older) == ["Plan my trip"]


def test_a_groups_newer_open_session_is_the_one_written_to(engine: Engine, other_engine: Engine) -> None:
    here = Conversations(make_sessionmaker(engine), engine)
    there = Conversations(make_sessionmaker(other_engine), other_engine)
    older = _turn(here, "Lunch at noon?", user=USER, chat=GROUP, kind="group")
    newer = there.start_session(USER + 1, GROUP, chat_type="group").id
    assert _turn(here, "Yes", user=USER, chat=GROUP, kind="group") == newer
    assert _texts(engine, older) == ["Lunch at noon?"]
    assert _texts(engine, newer) == ["Yes"]
