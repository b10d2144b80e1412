"""Forum topics as conversations: the conversation key of a (chat, topic), and the place a key stands for.

Everything kept per chat (sessions, the inbox, chat leases, schedules, files, code jobs) is kept per
conversation key. The key of a private chat, a group or a forum's General topic is its Telegram chat id, as
it always was; a topic of a forum supergroup gets `-(TOPIC_KEY_BASE + n)`, where n numbers it in
`forum_topics` (migration 0016). Telegram ids have at most 52 significant bits, so no chat id is a topic key.
"""

from __future__ import annotations

from typing import NamedTuple

from sqlalchemy import Engine, Table, insert, select
from sqlalchemy.exc import IntegrityError

from db.models import ForumTopic, utcnow

TOPIC_KEY_BASE = 1 << 53
_TOPICS: Table = ForumTopic.__table__  # type: ignore[assignment]
_MAX_CACHED = (
    10_000  # a bound, not an eviction policy: the mapping never changes, so it is refilled on demand
)


class Place(NamedTuple):
    """Where a conversation is in Telegram: the chat, and the forum topic (None outside a topic)."""

    chat_id: int
    thread_id: int | None = None


def is_topic_key(key: int) -> bool:
    """Whether a conversation key stands for a forum topic (and is not a Telegram chat id)."""
    return key <= -TOPIC_KEY_BASE


class Topics:
    """Conversation keys of forum topics, both ways (cached: a topic's key never changes)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._keys: dict[tuple[int, int], int] = {}
        self._places: dict[int, Place] = {}

    def key(self, chat_id: int, thread_id: int | None) -> int:
        """The conversation key of a chat, or of one of its forum topics (numbered on first use)."""
        if thread_id is None:
            return chat_id
        found = self._keys.get((chat_id, thread_id))
        if found is not None:
            return found
        number = self._find(chat_id, thread_id)
        if number is None:
            try:
                with self._engine.begin() as conn:
                    row = {"chat_id": chat_id, "thread_id": thread_id, "created_at": utcnow()}
                    created = conn.execute(insert(_TOPICS), row).inserted_primary_key
                    assert created is not None
                    number = int(created[0])
            except IntegrityError:  # another process numbered it a moment ago
                number = self._find(chat_id, thread_id)
                assert number is not None
        key = -(TOPIC_KEY_BASE + number)
        self._remember(key, Place(chat_id, thread_id))
        return key

    def place(self, key: int) -> Place:
        """The chat and topic a conversation key stands for (a chat id stands for itself)."""
        if not is_topic_key(key):
            return Place(key)
        found = self._places.get(key)
        if found is not None:
            return found
        with self._engine.connect() as conn:
            row = conn.execute(
                select(_TOPICS.c.chat_id, _TOPICS.c.thread_id).where(_TOPICS.c.id == -key - TOPIC_KEY_BASE)
            ).first()
        if row is None:
            raise LookupError(f"no forum topic has the conversation key {key}")
        place = Place(int(row.chat_id), int(row.thread_id))
        self._remember(key, place)
        return place

    def _find(self, chat_id: int, thread_id: int) -> int | None:
        with self._engine.connect() as conn:
            number = conn.execute(
                select(_TOPICS.c.id).where(_TOPICS.c.chat_id == chat_id, _TOPICS.c.thread_id == thread_id)
            ).scalar()
        return None if number is None else int(number)

    def _remember(self, key: int, place: Place) -> None:
        if len(self._places) > _MAX_CACHED:
            self._places.clear()
            self._keys.clear()
        self._places[key] = place
        assert place.thread_id is not None
        self._keys[(place.chat_id, place.thread_id)] = key
