"""The turn loop (core_tools/agent) with an in-process model over a real SQLite file: no HTTP server. What the
model is sent and answers, what the user sees streamed, and what is stored: messages, tool results, the
LLM-call log."""

from __future__ import annotations

import asyncio
import json

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from core_tools.agent import Agent, AgentConfig, TurnInput
from core_tools.errors import LLMUnavailable
from core_tools.llm.testing import FunctionModel, ModelCall, Reply, TestModel, ToolCall
from core_tools.registry import ToolRegistry
from core_tools.types import ToolContext
from db.conversations import Conversations
from db.models import LLMCall
from db.speakers import Speaker
from db.usage import UsageLog

USER = 42


async def lookup(ctx: ToolContext, q: str) -> dict[str, str]:
    """Look something up."""
    return {"result": f"about {q}"}


async def add(ctx: ToolContext, a: int, b: int) -> dict[str, int]:
    """Add two numbers."""
    return {"sum": a + b}


class Sink:
    """What a front end is shown: the answer as it streams, and status lines."""

    def __init__(self) -> None:
        self.texts: list[str] = []

    async def text(self, partial: str) -> None:
        self.texts.append(partial)

    async def status(self, line: str) -> None:
        return None


def agent(
    model: FunctionModel, sm: sessionmaker[Session], engine: Engine, config: AgentConfig | None = None
) -> tuple[Agent, Conversations]:
    registry = ToolRegistry(recorder=UsageLog(sm, engine))
    registry.register(lookup)
    registry.register(add)
    conversations = Conversations(sm, engine)
    return Agent(model, registry, conversations, config), conversations


def logged(sm: sessionmaker[Session]) -> list[LLMCall]:
    with sm() as s:
        return list(s.scalars(select(LLMCall).order_by(LLMCall.id)))


async def test_a_tool_round_then_the_answer(db_sessions: sessionmaker[Session], engine: Engine) -> None:
    def fn(call: ModelCall) -> str | Reply:
        if call.index == 0:
            assert call.last_user == "What about tides?" and set(call.tool_names) == {"lookup", "add"}
            return Reply("Let me look.", [ToolCall("lookup", {"q": "tides"})])
        # The tool's result is fed back after the model's own request for it.
        [result] = call.tool_results
        assert result.name == "lookup" and "about tides" in (result.content or "")
        return "Found: about tides, twice a day."

    model = FunctionModel(fn, recorder=UsageLog(db_sessions, engine))
    bot, conversations = agent(model, db_sessions, engine)
    sink = Sink()
    result = await bot.run_turn(TurnInput(Speaker(USER, USER), "What about tides?"), sink)
    assert result.text == "Found: about tides, twice a day." and result.tool_calls == 1
    assert [o.ok for o in result.outcomes] == [True]
    assert len(model.calls) == 2
    # Streamed a word at a time, the whole text so far each time, ending with the answer.
    assert sink.texts[-1] == "Found: about tides, twice a day." and len(sink.texts) > 2
    session = conversations.current_session(USER, USER)
    stored = conversations.messages(session.id)
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert stored[1].tool_calls is not None and stored[1].tool_calls[0]["name"] == "lookup"
    assert stored[-1].content == "Found: about tides, twice a day."
    assert stored[0].status == "answered"
    rows = logged(db_sessions)
    assert [(r.purpose, r.session_id, r.error) for r in rows] == [("chat", session.id, None)] * 2


async def test_a_failing_model_call_fails_the_turn_and_keeps_the_message(
    db_sessions: sessionmaker[Session],
    engine: Engine,
) -> None:
    def down(call: ModelCall) -> str:
        raise LLMUnavailable("the language model could not be reached")

    model = FunctionModel(down, recorder=UsageLog(db_sessions, engine))
    bot, conversations = agent(model, db_sessions, engine)
    with pytest.raises(LLMUnavailable, match="could not be reached"):
        await bot.run_turn(TurnInput(Speaker(USER, USER), "Hello?"), Sink())
    [message] = conversations.messages(conversations.current_session(USER, USER).id)
    assert (message.role, message.content, message.status) == ("user", "Hello?", "failed")
    assert [r.error for r in logged(db_sessions)] == ["the language model could not be reached"]


async def test_a_model_that_never_answers_meets_the_turn_time_limit(
    db_sessions: sessionmaker[Session],
    engine: Engine,
) -> None:
    async def silent(call: ModelCall) -> str:
        await asyncio.Event().wait()
        raise AssertionError("never set")

    model = FunctionModel(silent, recorder=UsageLog(db_sessions, engine))
    bot, conversations = agent(model, db_sessions, engine, AgentConfig(turn_timeout_s=0.2))
    with pytest.raises(TimeoutError):
        await bot.run_turn(TurnInput(Speaker(USER, USER), "Anyone there?"), Sink())
    [message] = conversations.messages(conversations.current_session(USER, USER).id)
    assert message.status == "failed"
    # The request was cut off: logged as stopped, with the estimate of what was sent.
    [row] = logged(db_sessions)
    assert row.error == "stopped" and row.tokens_estimated and row.prompt_tokens > 0


async def test_the_test_model_calls_each_tool_once_then_reports_their_results(
    db_sessions: sessionmaker[Session],
    engine: Engine,
) -> None:
    model = TestModel(recorder=UsageLog(db_sessions, engine))
    bot, _ = agent(model, db_sessions, engine)
    result = await bot.run_turn(TurnInput(Speaker(USER, USER), "Use your tools."), Sink())
    assert result.tool_calls == 2 and all(o.ok for o in result.outcomes)
    answered = json.loads(result.text)
    assert set(answered) == {"lookup", "add"}
    assert "about a" in json.dumps(answered["lookup"]) and '"sum": 0' in json.dumps(answered["add"])


async def test_at_the_round_limit_the_model_is_asked_for_an_answer_without_tools(
    db_sessions: sessionmaker[Session],
    engine: Engine,
) -> None:
    def fn(call: ModelCall) -> str | Reply:
        if call.tools:  # always another lookup while tools are offered
            return Reply(calls=[ToolCall("lookup", {"q": f"step {call.index}"})])
        return "Here is what I found so far."

    model = FunctionModel(fn, recorder=UsageLog(db_sessions, engine))
    bot, _ = agent(model, db_sessions, engine, AgentConfig(max_tool_rounds=2))
    result = await bot.run_turn(TurnInput(Speaker(USER, USER), "Dig deep."), Sink())
    assert result.stopped_by == "chain_limit" and result.tool_calls == 2
    assert result.text == "Here is what I found so far."
    assert [c.purpose for c in model.calls] == ["chat", "chat", "final"]
    assert model.calls[-1].tools == () and "about step 1" in (model.calls[-1].tool_results[0].content or "")
    assert [r.purpose for r in logged(db_sessions)] == ["chat", "chat", "final"]
