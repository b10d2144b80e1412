"""The tool registry's choke point and the history budget, without Telegram or the LLM."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Annotated, Literal

import pytest
from pydantic import Field

from core_tools.agent.history import build_history
from core_tools.errors import ToolError
from core_tools.registry import ToolRegistry
from core_tools.types import ToolCallRequest, ToolContext
from db.conversation_records import StoredMessage

CTX = ToolContext(user_id=1, chat_id=1, session_id="s")


async def greet(
    ctx: ToolContext,
    name: Annotated[str, Field(description="who to greet")],
    style: Literal["short", "long"] = "short",
) -> dict[str, str]:
    """Greet someone.

    Longer guidance that the model
    also reads, on one line.
    """
    if name == "boom":
        raise RuntimeError("kaboom")
    if name == "refuse":
        raise ToolError("I will not greet refuse")
    if name == "slow":
        await asyncio.sleep(5)
    return {"greeting": f"hi {name}" if style == "short" else f"hello there, {name}"}


def registry() -> ToolRegistry:
    reg = ToolRegistry()
    reg.register(greet, timeout_s=0.2)
    return reg


def test_schema_comes_from_signature_and_docstring() -> None:
    schema = registry().schemas()[0]["function"]
    assert schema["name"] == "greet"
    assert (
        schema["description"] == "Greet someone.\n\nLonger guidance that the model also reads, on one line."
    )
    params = schema["parameters"]
    assert params["required"] == ["name"]
    assert params["properties"]["name"] == {"description": "who to greet", "type": "string"}
    assert params["properties"]["style"]["enum"] == ["short", "long"]
    assert params["additionalProperties"] is False


async def test_failures_become_error_results() -> None:
    reg = registry()

    async def run(name: str, args: str) -> dict[str, object]:
        out = await reg.call(ToolCallRequest("c", name, args), CTX)
        return json.loads(out.content) if out.content.startswith("{") else {"raw": out.content}

    assert await run("greet", '{"name": "Ann"}') == {"greeting": "hi Ann"}
    assert "unknown tool 'nope'" in str((await run("nope", "{}"))["error"])
    assert "not valid JSON" in str((await run("greet", "{name:"))["error"])
    assert "style: Input should be 'short' or 'long'" in str(
        (await run("greet", '{"name": "A", "style": "x"}'))["error"]
    )
    assert "extra" in str((await run("greet", '{"name": "A", "colour": 1}'))["error"]).lower()
    assert "kaboom" in str((await run("greet", '{"name": "boom"}'))["error"])
    assert (await run("greet", '{"name": "refuse"}'))["error"] == "I will not greet refuse"
    assert "timed out after 0.2 s" in str((await run("greet", '{"name": "slow"}'))["error"])


async def test_long_results_are_capped_for_the_model() -> None:
    reg = ToolRegistry(max_result_chars=100)

    async def big(ctx: ToolContext) -> str:
        """Return a lot."""
        return "x" * 1000

    reg.register(big)
    out = await reg.call(ToolCallRequest("c", "big", ""), CTX)
    assert out.ok and len(out.content) < 200 and "900 more characters cut" in out.content


def _m(
    i: int, role: str, content: str | None, calls: list[str] | None = None, answers: str | None = None
) -> StoredMessage:
    tool_calls = [{"id": c, "name": "t", "arguments": "{}"} for c in calls] if calls else None
    return StoredMessage(
        i, role, content, tool_calls, answers, "t" if answers else None, "done", datetime.now(UTC)
    )


def test_history_drops_oldest_first_and_never_splits_a_tool_call() -> None:
    msgs = [
        _m(1, "user", "old question " * 50),
        _m(2, "assistant", "old answer " * 50),
        _m(3, "user", "use a tool"),
        _m(4, "assistant", None, calls=["a", "b"]),
        _m(5, "tool", "result a", answers="a"),
        _m(6, "tool", "result b", answers="b"),
        _m(7, "assistant", "done"),
        _m(8, "user", "next"),
    ]
    small = build_history(msgs, token_budget=60)
    assert small[0].content == "use a tool"
    assert [m.role for m in small] == ["user", "assistant", "tool", "tool", "assistant", "user"]
    tiny = build_history(msgs, token_budget=10)
    assert [(m.role, m.content) for m in tiny] == [("user", "next")]  # never starts with an assistant turn


def test_history_drops_a_tool_call_cut_by_a_crash() -> None:
    msgs = [
        _m(1, "user", "q"),
        _m(2, "assistant", None, calls=["a", "b"]),
        _m(3, "tool", "result a", answers="a"),
        _m(4, "user", "are you there?"),
    ]
    out = build_history(msgs, token_budget=1000)
    assert [(m.role, m.content) for m in out] == [("user", "q"), ("user", "are you there?")]


def test_a_docstring_over_the_description_bound_is_refused_at_registration() -> None:
    async def wordy(ctx: ToolContext) -> str:
        return "x"

    wordy.__doc__ = "Say something.\n\n" + "Guidance words. " * 100
    with pytest.raises(ValueError, match="more than 1200"):
        ToolRegistry().register(wordy)


async def test_an_external_tools_description_is_bounded_and_its_schema_checked() -> None:
    reg = ToolRegistry()

    async def call(ctx: ToolContext, arguments: dict[str, object]) -> dict[str, object]:
        return {"got": arguments}

    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"]}
    reg.register_external("srv__tool", "Long words. " * 500, schema, call, timeout_s=1)
    (fn,) = [s["function"] for s in reg.schemas()]
    assert len(fn["description"]) <= 1200 and fn["description"].endswith("…")
    assert fn["parameters"] == schema
    ok = await reg.call(ToolCallRequest("c", "srv__tool", '{"n": 2}'), CTX)
    assert json.loads(ok.content) == {"got": {"n": 2}}
    bad = await reg.call(ToolCallRequest("c", "srv__tool", '{"n": 0}'), CTX)
    assert not bad.ok and "n: 0 is less than the minimum of 1" in (bad.error or "")
    with pytest.raises(ValueError, match="registered twice"):
        reg.register_external("srv__tool", "again", schema, call, timeout_s=1)


async def test_an_external_schema_is_checked_in_linear_time_and_within_a_deadline() -> None:
    reg = ToolRegistry()

    async def call(ctx: ToolContext, arguments: dict[str, object]) -> dict[str, object]:
        return {"got": arguments}

    def tool(name: str, schema: dict[str, object]) -> None:
        reg.register_external(name, name, {"type": "object", **schema}, call, timeout_s=5)

    async def run(name: str, args: object) -> tuple[bool, str]:
        out = await reg.call(ToolCallRequest("c", name, json.dumps(args)), CTX)
        return out.ok, out.error or out.content

    evil = "a" * 40 + "!"  # Python's `re` takes ~2**40 steps for ^(a+)+$ on this
    tool("regex", {"properties": {"s": {"type": "string", "pattern": "^(a+)+$"}}})
    assert await run("regex", {"s": "aaaa"}) == (True, '{"got": {"s": "aaaa"}}')
    ok, error = await run("regex", {"s": evil})
    assert not ok and "does not match '^(a+)+$'" in error
    tool("keys", {"patternProperties": {"^(a+)+$": {"type": "integer"}}, "additionalProperties": False})
    ok, error = await run("keys", {evil: 1})
    assert not ok and "Additional properties are not allowed" in error
    assert (await run("keys", {"aaa": "x"}))[0] is False  # a key that matches is held to its schema
    tool("unique", {"properties": {"xs": {"type": "array", "uniqueItems": True}}})
    ok, error = await run("unique", {"xs": [{"i": i} for i in range(20_000)] + [{"i": 7}]})
    assert not ok and "non-unique elements" in error
    # A pattern RE2 cannot read (a look-ahead) is left for the server to check.
    tool("lookahead", {"properties": {"s": {"type": "string", "pattern": "^(?=a)a+$"}}})
    assert (await run("lookahead", {"s": "b"}))[0] is True
    # Nested choices over `$ref` take 2**depth steps: the check stops at its deadline with an error.
    branch = {"type": "array", "items": {"$ref": "#/$defs/n"}}
    tool("nested", {"$defs": {"n": {"anyOf": [branch, branch]}}, "properties": {"v": {"$ref": "#/$defs/n"}}})
    deep: object = "leaf"
    for _ in range(40):
        deep = [deep]
    ok, error = await run("nested", {"v": deep})
    assert not ok and "could not be checked against its schema within 2 s" in error
