"""The in-process chat models (core_tools/llm/testing.py) over a real SQLite file: streamed like the
client, held to the same caps and written to the same LLM-call log; TestModel's arguments pass the tools'
validation."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

import pytest
from pydantic import BaseModel
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from core_tools.errors import BudgetExceeded, LLMUnavailable
from core_tools.llm.testing import FunctionModel, ModelCall, Reply, TestModel, ToolCall, arguments_for
from core_tools.registry import ToolRegistry
from core_tools.types import ChatMessage, ToolCallRequest, ToolContext, Usage
from core_tools.usage.caps import Caps
from core_tools.usage.service import UsageService
from db.models import LLMCall
from db.usage import UsageLog, UsageQueries

USER = 7


def calls(sm: sessionmaker[Session]) -> list[LLMCall]:
    with sm() as s:
        return list(s.scalars(select(LLMCall).order_by(LLMCall.id)))


async def test_the_reply_streams_word_by_word_and_its_call_is_logged(
    db_sessions: sessionmaker[Session],
    engine: Engine,
) -> None:
    model = FunctionModel(lambda call: "Tides come twice a day.", recorder=UsageLog(db_sessions, engine))
    seen: list[str] = []

    async def on_delta(partial: str) -> None:
        seen.append(partial)

    reply = await model.complete(
        [ChatMessage("user", "When are the tides?")], on_delta=on_delta, user_id=USER, session_id="s1"
    )
    assert reply.content == "Tides come twice a day." and reply.finish_reason == "stop"
    # The whole text so far each time, as the client streams it.
    assert seen == [
        "Tides ",
        "Tides come ",
        "Tides come twice ",
        "Tides come twice a ",
        "Tides come twice a day.",
    ]
    [row] = calls(db_sessions)
    assert (row.user_id, row.session_id, row.purpose, row.model, row.error) == (
        USER,
        "s1",
        "chat",
        "test-model",
        None,
    )
    # No usage reported: estimated from the request and the reply, as for a server that reports none.
    assert row.tokens_estimated and row.prompt_tokens > 0 and row.completion_tokens > 0


async def test_reported_usage_and_tool_calls_come_back_as_given(
    db_sessions: sessionmaker[Session], engine: Engine
) -> None:
    def fn(call: ModelCall) -> Reply:
        return Reply(
            "Looking.", [ToolCall("lookup", {"q": "x"}), ToolCall("lookup", '{"q": "y"}')], Usage(40, 9)
        )

    model = FunctionModel(fn, recorder=UsageLog(db_sessions, engine))
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    reply = await model.complete([ChatMessage("user", "hi")], tools=tools)
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [
        ("lookup", '{"q": "x"}'),
        ("lookup", '{"q": "y"}'),
    ]
    assert len({c.id for c in reply.tool_calls}) == 2 and reply.finish_reason == "tool_calls"
    assert model.calls[0].tool_names == ["lookup"]
    [row] = calls(db_sessions)
    assert (row.prompt_tokens, row.completion_tokens, row.tokens_estimated) == (40, 9, False)


async def test_a_failing_model_is_an_unavailable_llm_and_is_logged(
    db_sessions: sessionmaker[Session],
    engine: Engine,
) -> None:
    def down(call: ModelCall) -> str:
        raise LLMUnavailable("the language model could not be reached")

    def broken(call: ModelCall) -> str:
        raise RuntimeError("boom")

    for fn, reason in [
        (down, "the language model could not be reached"),
        (broken, "the language model call failed (RuntimeError)"),
    ]:
        with pytest.raises(LLMUnavailable) as caught:
            await FunctionModel(fn, recorder=UsageLog(db_sessions, engine)).complete(
                [ChatMessage("user", "hi")]
            )
        assert str(caught.value) == reason
    assert [r.error for r in calls(db_sessions)] == [
        "the language model could not be reached",
        "the language model call failed (RuntimeError)",
    ]


async def test_a_user_over_the_cap_is_refused_before_the_model_is_asked(
    db_sessions: sessionmaker[Session],
    engine: Engine,
) -> None:
    budget = UsageService(
        UsageQueries(db_sessions, engine), defaults=Caps(daily_tokens=100), clock=lambda: datetime.now(UTC)
    )
    model = FunctionModel(lambda call: "x" * 2000, recorder=UsageLog(db_sessions, engine), budget=budget)
    await model.complete([ChatMessage("user", "write a lot")], user_id=USER)  # under the cap; crosses it
    with pytest.raises(BudgetExceeded):
        await model.complete([ChatMessage("user", "more")], user_id=USER)
    assert len(model.calls) == 1 and len(calls(db_sessions)) == 1


async def test_a_deferred_record_is_stored_only_when_the_caller_settles_it(
    db_sessions: sessionmaker[Session],
    engine: Engine,
) -> None:
    model = FunctionModel(lambda call: "ok", recorder=UsageLog(db_sessions, engine))
    reply = await model.complete([ChatMessage("user", "hi")], defer_record=True)
    assert reply.unrecorded is not None and calls(db_sessions) == []
    reply.unrecorded.store_alone()
    assert [r.purpose for r in calls(db_sessions)] == ["chat"]


class Window(BaseModel):
    start: int
    days: int = 7


async def plan(
    ctx: ToolContext,
    place: str,
    count: int,
    mode: Literal["walk", "bike"],
    window: Window,
    tags: list[str],
    note: str | None = None,
) -> dict[str, object]:
    """Plan a trip."""
    return {"place": place, "count": count, "mode": mode, "start": window.start, "tags": tags, "note": note}


async def test_test_model_arguments_pass_the_tools_validation() -> None:
    registry = ToolRegistry()
    tool = registry.register(plan)
    args = arguments_for(tool.schema()["function"]["parameters"])
    assert args == {"place": "a", "count": 0, "mode": "walk", "window": {"start": 0}, "tags": ["a"]}
    model = TestModel()
    reply = await model.complete([ChatMessage("user", "plan")], tools=registry.schemas())
    [asked] = reply.tool_calls
    outcome = await registry.call(
        ToolCallRequest(asked.id, asked.name, asked.arguments), ToolContext(1, 1, "s")
    )
    assert outcome.ok, outcome.error
    assert '"mode": "walk"' in outcome.content
