"""The runtime's one-transaction steps on each database: a message's arrival (its update's dedup, its inbox
row, its chat's claim with the turns a dead process left), a turn's opening and closing (published on and
cleared from the chat's lease with the turn's rows), and what a process learns of the chats it keeps."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Engine, func, select, update

from db.conversation_records import Answer, TurnClosing, TurnOpening
from db.conversations import Conversations
from db.engine import make_sessionmaker
from db.models import InboxMessage, LLMCall, Message, Replica, utcnow
from db.runtime import Entry, RuntimeStore, TurnMark
from db.speakers import Speaker
from db.usage import LLMCallRecord

LEASE = timedelta(seconds=15)
BOT = 123456


def store_of(engine: Engine, *names: str) -> RuntimeStore:
    store = RuntimeStore(engine, LEASE)
    for n, name in enumerate(names):
        store.join(name, "host/boot", 100 + n, "1")
    return store


def count(engine: Engine, table: type) -> int:
    with engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar() or 0)


def test_an_arrival_is_queued_once_with_its_chats_claim(engine: Engine) -> None:
    store = store_of(engine, "a", "b")
    hello = Entry(Speaker(7, 7, "private"), "hello", update_id=501)
    first = store.arrive(hello, update_of=BOT, claim_for="a")
    assert first.inbox_id is not None and first.claimed is not None and first.claimed.interrupted == []
    again = store.arrive(hello, update_of=BOT, claim_for="b")  # the same update, delivered to b too
    assert again.inbox_id is None and again.claimed is None
    assert count(engine, InboxMessage) == 1
    # Another message of the chat reaching b: queued, the chat stays a's.
    other = store.arrive(Entry(Speaker(7, 7, "private"), "more", update_id=502), update_of=BOT, claim_for="b")
    assert other.inbox_id is not None and other.claimed is None
    assert store.waiting_for("a") == {7} and store.waiting_for("b") == set()


def test_a_claim_reports_the_turns_a_dead_holder_left_once(engine: Engine) -> None:
    store = store_of(engine, "a", "b")
    conv = Conversations(make_sessionmaker(engine), engine)
    assert store.claim_chat(7, "a")
    opened = conv.open_turn(TurnOpening(Speaker(7, 7, "private", "Ann"), texts=(("Plan my trip", 1),)))
    with engine.begin() as conn:  # a stops heart-beating mid-turn
        conn.execute(update(Replica).where(Replica.id == "a").values(heartbeat_at=utcnow() - 2 * LEASE))
    claimed = store.arrive(Entry(Speaker(7, 7, "private"), "hello?", update_id=9), claim_for="b").claimed
    assert claimed is not None
    assert [(p.id, p.content) for p in claimed.interrupted] == [(opened.message_ids[0], "Plan my trip")]
    with engine.connect() as conn:
        status = conn.execute(select(Message.status).where(Message.id == opened.message_ids[0])).scalar()
    assert status == "interrupted"
    store.release_chat(7, "b")
    again = store.claim_chat(7, "b")
    assert again is not None and again.interrupted == []


def test_a_chat_the_database_says_a_process_holds_is_taken_back_by_it(engine: Engine) -> None:
    store = store_of(engine, "a", "b")
    assert store.claim_chat(7, "a")
    # a lost track of it (a release that failed): nothing there holds it, so a's claim takes it back...
    assert store.claim_chat(7, "a")
    assert not store.claim_chat(7, "b")  # ... and b, while a lives, does not get it
    assert store.chats_of("a") == {7}


def test_a_turn_is_published_with_its_messages_and_cleared_with_its_answer_and_usage(engine: Engine) -> None:
    store = store_of(engine, "a")
    conv = Conversations(make_sessionmaker(engine), engine)
    arrival = store.arrive(
        Entry(Speaker(7, 7, "private"), "hello", update_id=1), update_of=BOT, claim_for="a"
    )
    assert arrival.inbox_id is not None
    mark = TurnMark(7, "a", 4242, 7)
    opened = conv.open_turn(
        TurnOpening(Speaker(7, 7, "private"), texts=(("hello", 1),), inbox_ids=(arrival.inbox_id,), mark=mark)
    )
    running = store.running(7)
    assert running is not None and (running.turn, running.owner) == (4242, 7)
    assert count(engine, InboxMessage) == 0  # moved into the history in the same transaction
    usage = LLMCallRecord(7, opened.session.id, "chat", "m", prompt_tokens=30, completion_tokens=5)
    conv.close_turn(
        TurnClosing(
            opened.session.id, 7, 7, tuple(opened.message_ids), "answered", Answer("Hi!"), usage, mark
        )
    )
    assert store.running(7) is None
    with engine.connect() as conn:
        rows = conn.execute(select(Message.role, Message.content, Message.status).order_by(Message.id)).all()
        calls = conn.execute(select(LLMCall.session_id, LLMCall.prompt_tokens)).all()
    assert [tuple(r) for r in rows] == [("user", "hello", "answered"), ("assistant", "Hi!", "done")]
    assert [tuple(c) for c in calls] == [(opened.session.id, 30)]
