"""Forum topics' conversation keys on SQLite and PostgreSQL: stable, distinct, never a Telegram chat id."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine

from db.conversations import Conversations
from db.engine import make_engine, make_sessionmaker
from db.migrate import downgrade, upgrade
from db.topics import TOPIC_KEY_BASE, Place, Topics, is_topic_key

FORUM = -1003070712535  # a real-looking forum supergroup id
BIGGEST_CHAT = -(2**52 - 1)  # Telegram ids have at most 52 significant bits


def test_a_topic_key_stands_for_its_topic_across_processes(engine: Engine) -> None:
    here, there = Topics(engine), Topics(engine)  # two processes: separate caches, one table
    trips = here.key(FORUM, 7)
    assert is_topic_key(trips) and trips <= -TOPIC_KEY_BASE < BIGGEST_CHAT
    assert here.key(FORUM, 7) == trips and there.key(FORUM, 7) == trips
    assert there.place(trips) == Place(FORUM, 7)
    books = there.key(FORUM, 9)
    assert books != trips and here.place(books) == Place(FORUM, 9)
    assert here.key(-1001, 7) not in (trips, books)  # the same thread id in another forum


def test_chats_outside_topics_keep_their_own_id(engine: Engine) -> None:
    topics = Topics(engine)
    for chat in (42, -100777, BIGGEST_CHAT, FORUM):  # private, group, the largest id, a forum's General
        assert topics.key(chat, None) == chat and topics.place(chat) == Place(chat)
        assert not is_topic_key(chat)
    with pytest.raises(LookupError):
        topics.place(-(TOPIC_KEY_BASE + 999_999))


def test_a_topic_has_its_own_session(engine: Engine) -> None:
    conv = Conversations(make_sessionmaker(engine), engine)
    trips, books = conv.topics.key(FORUM, 7), conv.topics.key(FORUM, 9)
    one = conv.current_session(1, trips, chat_type="supergroup")
    two = conv.current_session(2, books, chat_type="supergroup")
    general = conv.current_session(1, FORUM, chat_type="supergroup")
    assert len({one.id, two.id, general.id}) == 3
    assert conv.current_session(2, trips, chat_type="supergroup").id == one.id  # shared by its members


def test_the_migration_keeps_existing_chats_and_sessions(database_url: str) -> None:
    downgrade(database_url, "0015")
    engine = make_engine(database_url)
    try:
        conv = Conversations(make_sessionmaker(engine), engine)
        before = conv.current_session(1, FORUM, chat_type="supergroup")
        conv.add_message(before.id, 1, FORUM, "user", "hello")
        upgrade(database_url)
        assert conv.current_session(1, FORUM, chat_type="supergroup").id == before.id  # General: as it was
        assert [m.content for m in conv.messages(before.id)] == ["hello"]
        topic = conv.topics.key(FORUM, 7)
        assert conv.current_session(1, topic, chat_type="supergroup").id != before.id
    finally:
        engine.dispose()
