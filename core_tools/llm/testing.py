"""In-process chat models (core_tools.llm.model.ChatModel) for tests: the turn loop, the memory judge,
extraction and session summaries run against them without an HTTP server.

- `FunctionModel(fn)`: `fn(call)` answers each request, given its messages and tools (a ModelCall), with a
  text or a Reply (text and tool calls), or an awaitable of one; raising fails the request as a failing
  endpoint does (LLMUnavailable with a reason: the exception's own when it is LLMUnavailable).
- `TestModel`: calls each offered tool once with arguments made from its JSON schema, then answers with a
  fixed text or, without one, the tools' results as JSON (the shape of pydantic-ai's TestModel).

Both are held to the same caps and log as the OpenAI-compatible client (core_tools.llm.accounting.metered):
the reservation, the LLM-call record (or `reply.unrecorded` with `defer_record`), the estimate of a reply
without usage, a stopped request's record. What only the openai client and a real process do (the wire
format, retries, timeouts, image refusals) stays with the loopback fake OpenAI server of the tests.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from core_tools.errors import LLMUnavailable
from core_tools.llm.accounting import BudgetGate, DeltaCallback, LLMCallRecorder, metered
from core_tools.llm.chat import BACKGROUND_PURPOSES
from core_tools.llm.model import ChatModel
from core_tools.types import ChatMessage, LLMReply, ToolCallRequest, Usage

_PIECE = re.compile(r"\s*\S+\s*|\s+")  # how a reply's text is streamed: a word at a time


@dataclass(frozen=True)
class ModelCall:
    """One request as the model receives it."""

    messages: tuple[ChatMessage, ...]
    tools: tuple[dict[str, Any], ...]  # the tool schemas offered (none: no tools may be called)
    purpose: str
    model: str  # the model it is made with (the chat's, the background one or the default)
    user_id: int | None
    session_id: str | None
    max_completion_tokens: int | None
    index: int  # this model's requests, counted from 0

    @property
    def tool_names(self) -> list[str]:
        """The names of the tools offered."""
        return [t["function"]["name"] for t in self.tools]

    @property
    def system(self) -> str:
        """The system messages' text, joined."""
        return "\n\n".join(m.content or "" for m in self.messages if m.role == "system")

    @property
    def last_user(self) -> str:
        """The text of the last user message ("" when there is none)."""
        return next((m.content or "" for m in reversed(self.messages) if m.role == "user"), "")

    @property
    def tool_results(self) -> list[ChatMessage]:
        """The tool results the request ends with: what the tools called in the previous reply returned."""
        out: list[ChatMessage] = []
        for m in reversed(self.messages):
            if m.role == "system":  # a note after the results (the final round's) is passed over
                continue
            if m.role != "tool":
                break
            out.append(m)
        return out[::-1]


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model asks for: arguments as an object (sent as JSON) or raw JSON text."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None  # None: one is made up


@dataclass(frozen=True)
class Reply:
    """A model's answer to one request."""

    text: str = ""
    calls: Sequence[ToolCall] = ()
    usage: Usage | None = None  # None: estimated, as for a server that reports none
    finish_reason: str | None = None  # None: "tool_calls" with calls, else "stop"


Answer = str | Reply
ModelFunction = Callable[[ModelCall], Answer | Awaitable[Answer]]


def _explain(exc: Exception) -> str:
    if isinstance(exc, LLMUnavailable):
        return str(exc)
    return f"the language model call failed ({type(exc).__name__})"


class FunctionModel(ChatModel):
    """A chat model whose every reply `fn` makes; its text is streamed to `on_delta` word by word."""

    def __init__(
        self,
        fn: ModelFunction,
        *,
        model: str = "test-model",
        background_model: str | None = None,
        recorder: LLMCallRecorder | None = None,
        budget: BudgetGate | None = None,
        max_completion_tokens: int | None = None,
    ) -> None:
        self.fn = fn
        self.model = model
        self.background_model = background_model or model
        self._recorder = recorder
        self.budget = budget
        self.max_completion_tokens = max_completion_tokens
        self.calls: list[ModelCall] = []  # every request made (not those the caps refused), in order
        self._ids = 0

    async def check(self) -> str:
        return f"in process, model {self.model!r}"

    async def close(self) -> None:
        return None

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: list[dict[str, Any]] | None = None,
        on_delta: DeltaCallback | None = None,
        purpose: str = "chat",
        user_id: int | None = None,
        session_id: str | None = None,
        model: str | None = None,
        defer_record: bool = False,
        max_completion_tokens: int | None = None,
    ) -> LLMReply:
        ceiling = max_completion_tokens or self.max_completion_tokens
        model = model or (self.background_model if purpose in BACKGROUND_PURPOSES else self.model)
        body: dict[str, Any] = {"model": model, "messages": [m.to_openai() for m in messages]}
        if tools:
            body["tools"] = tools

        async def send(on_text: DeltaCallback) -> LLMReply:
            index = len(self.calls)
            call = ModelCall(
                tuple(messages), tuple(tools or ()), purpose, model, user_id, session_id, ceiling, index
            )
            self.calls.append(call)
            answer = self.fn(call)
            if inspect.isawaitable(answer):
                answer = await answer
            reply = Reply(answer) if isinstance(answer, str) else answer
            sent = ""
            for piece in _PIECE.findall(reply.text):
                sent += piece
                await on_text(sent)
            requests = [self._request(c) for c in reply.calls]
            finish = reply.finish_reason or ("tool_calls" if requests else "stop")
            return LLMReply(reply.text, requests, reply.usage or Usage(), finish, model)

        return await metered(
            send,
            request=orjson.dumps(body),
            model=model,
            purpose=purpose,
            user_id=user_id,
            session_id=session_id,
            ceiling=ceiling,
            budget=self.budget,
            recorder=self._recorder,
            on_delta=on_delta,
            defer_record=defer_record,
            explain=_explain,
        )

    def _request(self, call: ToolCall) -> ToolCallRequest:
        self._ids += 1
        args = call.arguments if isinstance(call.arguments, str) else json.dumps(dict(call.arguments))
        return ToolCallRequest(call.id or f"call_{self._ids}", call.name, args)


class TestModel(FunctionModel):
    """Calls each offered tool (or those in `call_tools`) once, with arguments made from its schema
    (`arguments_for`); a request that ends with tool results, or offers none of those tools, is answered
    with `text`, or without one with the results as JSON ({tool name: result}) or "success (no tool calls)".
    """

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        text: str | None = None,
        *,
        call_tools: Sequence[str] | Literal["all"] = "all",
        **kwargs: Any,
    ) -> None:
        super().__init__(self._answer, **kwargs)
        self.text = text
        self.call_tools = call_tools

    def _answer(self, call: ModelCall) -> Answer:
        results = call.tool_results
        if results:
            if self.text is not None:
                return self.text
            return json.dumps({m.name or m.tool_call_id: _loaded(m.content) for m in results})
        wanted = [
            t["function"]
            for t in call.tools
            if self.call_tools == "all" or t["function"]["name"] in self.call_tools
        ]
        if wanted:
            calls = [ToolCall(f["name"], arguments_for(f.get("parameters") or {})) for f in wanted]
            return Reply(calls=calls)
        return self.text if self.text is not None else "success (no tool calls)"


def _loaded(content: str | None) -> Any:
    try:
        return json.loads(content or "")
    except json.JSONDecodeError:
        return content


def arguments_for(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments that a tool's JSON schema accepts: each required property with a value of its type (its
    const, default or first enum value when it has one; the least a minimum, minLength or minItems allows);
    optional properties are left out."""
    defs = {**schema.get("definitions", {}), **schema.get("$defs", {})}
    value = _example(schema, defs, 0)
    return value if isinstance(value, dict) else {}


def _example(schema: Mapping[str, Any], defs: Mapping[str, Any], depth: int) -> Any:
    if depth > 12 or not isinstance(schema, Mapping):
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return _example(defs.get(ref.rsplit("/", 1)[-1], {}), defs, depth + 1)
    for key in ("const", "default"):
        if key in schema:
            return schema[key]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf", "allOf"):
        options = schema.get(key)
        if options:
            real = [o for o in options if o.get("type") != "null"] or options
            return _example(real[0], defs, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" or (kind is None and "properties" in schema):
        required = set(schema.get("required", ()))
        props = schema.get("properties", {})
        return {name: _example(sub, defs, depth + 1) for name, sub in props.items() if name in required}
    if kind == "array":
        items = schema.get("items", {})
        count = max(int(schema.get("minItems", 0)), 0 if schema.get("maxItems") == 0 else 1)
        return [_example(items, defs, depth + 1) for _ in range(count)]
    if kind in ("integer", "number"):
        low = schema.get("minimum", schema.get("exclusiveMinimum", None))
        value = 0 if low is None else low + (1 if "minimum" not in schema else 0)
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return False
    if kind == "string":
        fmt = schema.get("format")
        if fmt == "date":
            return "2026-01-01"
        if fmt == "date-time":
            return "2026-01-01T00:00:00Z"
        return "a" * max(int(schema.get("minLength", 0)), 1)
    return None
