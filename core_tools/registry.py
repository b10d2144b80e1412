"""The tool registry: a tool is a typed async function; every call passes one choke point."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, get_type_hints

import jsonschema
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from core_tools.capabilities import Capabilities, declared
from core_tools.errors import ToolError
from core_tools.schema_check import CHECK_SECONDS, CheckTimeout, bounded_validator, check_arguments
from core_tools.types import ToolCallRequest, ToolContext, ToolOutcome
from db.usage import ToolCallRecord

log = logging.getLogger(__name__)

ToolFn = Callable[..., Awaitable[Any]]
# A tool defined by a JSON schema rather than a signature (an MCP server's): called with the arguments object.
ExternalFn = Callable[[ToolContext, dict[str, Any]], Awaitable[Any]]

# The most characters of a tool's description sent to the model: the whole docstring guidance goes in, but a
# tool must not spend the prompt on prose (a test holds every registered tool to this).
MAX_DESCRIPTION_CHARS = 1200


def describe(doc: str, name: str) -> str:
    """The model-facing description: every paragraph of the docstring, each on one line."""
    paragraphs = [" ".join(p.split()) for p in doc.split("\n\n")]
    return "\n\n".join(p for p in paragraphs if p) or name


def bound_description(text: str, limit: int = MAX_DESCRIPTION_CHARS) -> str:
    """A description cut to `limit` characters (for tools whose text we do not write: MCP servers')."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


class ToolCallRecorder(Protocol):
    """Where the registry logs each call (the database in the app)."""

    def record_tool_call(self, record: ToolCallRecord) -> None: ...


class ResultStore(Protocol):
    """Where a result longer than one page is kept for `read_result` (the database in the app)."""

    def store(
        self, *, user_id: int, session_id: str, tool: str, call_id: str, text: str, untrusted: bool
    ) -> str: ...


READ_ON_NOTE = (
    "This result is longer than one page: you have its first {page} of {total} characters. Read on with "
    "read_result(handle={handle!r}, offset={next_offset}), or find text in it with "
    "read_result(handle, search=...)."
)


def _strip_titles(schema: Any) -> Any:
    """Drop pydantic's auto titles: they cost tokens and tell the model nothing."""
    if isinstance(schema, dict):
        return {k: _strip_titles(v) for k, v in schema.items() if not (k == "title" and isinstance(v, str))}
    if isinstance(schema, list):
        return [_strip_titles(v) for v in schema]
    return schema


@dataclass(frozen=True)
class Tool:
    """A registered tool: name, description, the function and the argument model built from its signature."""

    name: str
    description: str
    fn: ToolFn
    args_model: type[BaseModel] | None
    timeout_s: float
    # Set for tools defined by a JSON schema (MCP servers' tools): arguments are validated against it.
    input_schema: dict[str, Any] | None = None
    # Whether a long result is stored and given by pages; `read_result` itself is bounded by its own length.
    paged: bool = True
    # What the tool reads and writes (core_tools.capabilities); None: not declared.
    capabilities: Capabilities | None = None
    # Its MCP server's entry asks for the user's approval before each call (`"confirm"` in MCP_SERVERS_FILE).
    confirm: bool = False

    @functools.cached_property
    def validator(self) -> Any:
        """The JSON-schema validator of an external tool's arguments (bounded: core_tools.schema_check)."""
        assert self.input_schema is not None
        return bounded_validator(self.input_schema)

    @classmethod
    def from_function(
        cls, fn: ToolFn, *, name: str | None = None, timeout_s: float = 60.0, paged: bool = True
    ) -> Tool:
        """Build a tool from `async def f(ctx: ToolContext, a: int, b: str = "x")` and its docstring."""
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"tool {fn!r} must be an async function")
        hints = get_type_hints(fn, include_extras=True)
        fields: dict[str, Any] = {}
        for pname, param in inspect.signature(fn).parameters.items():
            if pname in ("self", "ctx"):
                continue
            if pname not in hints:
                raise TypeError(f"tool parameter {pname!r} of {fn!r} needs a type annotation")
            default = ... if param.default is inspect.Parameter.empty else param.default
            fields[pname] = (hints[pname], default)
        tool_name = name or fn.__name__
        model = create_model(f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
        description = describe(inspect.getdoc(fn) or "", tool_name)
        if len(description) > MAX_DESCRIPTION_CHARS:
            raise ValueError(
                f"the description of tool {tool_name!r} has {len(description)} characters, "
                f"more than {MAX_DESCRIPTION_CHARS}: shorten its docstring"
            )
        return cls(tool_name, description, fn, model, timeout_s, paged=paged, capabilities=declared(fn))

    @functools.cached_property
    def schema_dict(self) -> dict[str, Any]:
        """The schema, generated once: pydantic's generation was a visible share of every turn's CPU."""
        return self.schema()

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-tool schema."""
        if self.input_schema is not None:
            params = dict(self.input_schema)
        else:
            assert self.args_model is not None
            params = _strip_titles(self.args_model.model_json_schema())
        params.setdefault("type", "object")
        params.setdefault("properties", {})
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": params},
        }


def _validation_message(err: ValidationError) -> str:
    parts = []
    for e in err.errors(include_url=False):
        loc = ".".join(str(p) for p in e["loc"]) or "arguments"
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)


class ToolRegistry:
    """Holds the tools and runs every call through `call`, which never raises."""

    def __init__(
        self,
        recorder: ToolCallRecorder | None = None,
        max_result_chars: int = 12_000,
        results: ResultStore | None = None,
        page_chars: int = 8000,
    ) -> None:
        self._tools: dict[str, Tool] = {}
        self._recorder = recorder
        # A longer result is stored in `results` and the model gets its first `page_chars` and a handle;
        # without a store it is cut.
        self.max_result_chars = max_result_chars
        self.results = results
        self.page_chars = min(page_chars, max_result_chars)
        # Per-user lines added to a tool's description (the code tool's lessons note): read from memory on
        # every turn, so a note must never query anything.
        self._notes: dict[str, Callable[[int], str | None]] = {}

    def register(
        self, fn: ToolFn, *, name: str | None = None, timeout_s: float = 60.0, paged: bool = True
    ) -> Tool:
        """Register an async function as a tool."""
        return self._add(Tool.from_function(fn, name=name, timeout_s=timeout_s, paged=paged))

    def register_external(
        self,
        name: str,
        description: str,
        input_schema: dict[str, Any],
        fn: ExternalFn,
        *,
        timeout_s: float,
        capabilities: Capabilities | None = None,
        confirm: bool = False,
    ) -> Tool:
        """Register a tool given by a JSON schema (an MCP server's); ValueError for a name already taken."""
        jsonschema.validators.validator_for(
            input_schema, default=jsonschema.Draft202012Validator
        ).check_schema(input_schema)
        return self._add(
            Tool(
                name,
                bound_description(description),
                fn,
                None,
                timeout_s,
                input_schema,
                capabilities=capabilities,
                confirm=confirm,
            )
        )

    def unregister(self, name: str) -> None:
        """Remove a tool (an MCP server's, before its tools are listed again)."""
        self._tools.pop(name, None)

    def _add(self, tool: Tool) -> Tool:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} registered twice")
        self._tools[tool.name] = tool
        return tool

    def get(self, name: str) -> Tool | None:
        """The tool registered under `name`, or None."""
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        """Names of the registered tools."""
        return list(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """Schemas of every tool, for the LLM request."""
        return [t.schema_dict for t in self._tools.values()]

    def set_note(self, name: str, note: Callable[[int], str | None]) -> None:
        """Have `note(user_id)` (memory only, no I/O) appended to tool `name`'s description in that user's
        turns; it stays across the tool being registered again."""
        self._notes[name] = note

    def schemas_for(self, user_id: int) -> list[dict[str, Any]]:
        """Schemas of every tool, the user's notes added to their descriptions (copies: shared ones stay)."""
        schemas = self.schemas()
        if not self._notes:
            return schemas
        out = []
        for schema in schemas:
            fn = schema["function"]
            note_of = self._notes.get(fn["name"])
            try:
                note = note_of(user_id) if note_of is not None else None
            except Exception:  # a note is a hint: it must never cost the turn
                log.exception("the note of tool %s failed", fn["name"])
                note = None
            if note:
                schema = {**schema, "function": {**fn, "description": f"{fn['description']}\n\n{note}"}}
            out.append(schema)
        return out

    async def call(self, request: ToolCallRequest, ctx: ToolContext) -> ToolOutcome:
        """Validate, run, time-limit and log one call; any failure becomes an error result for the model."""
        started = time.monotonic()
        error: str | None = None
        content: str
        untrusted = False
        try:
            value = await self._run(request, ctx)
            full = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
            content = full
            untrusted = isinstance(value, dict) and value.get("untrusted_external_content") is True
        except ToolError as exc:
            error = str(exc)
        except TimeoutError:
            tool = self._tools.get(request.name)
            error = f"the tool {request.name!r} timed out after {tool.timeout_s if tool else '?'} s"
        except Exception as exc:  # the choke point: a tool bug must not end the turn
            log.exception("tool %s failed", request.name)
            error = f"the tool {request.name!r} failed: {type(exc).__name__}: {exc}"
        if error is not None:
            full = json.dumps({"ok": False, "error": error}, ensure_ascii=False)
            content = full
        tool = self._tools.get(request.name)
        if len(content) > self.max_result_chars and (tool is None or tool.paged):
            content = self._page(request, ctx, content, untrusted)
        duration_ms = int((time.monotonic() - started) * 1000)
        log.info(
            "tool call %s id=%s ok=%s %d ms%s",
            request.name,
            request.id,
            error is None,
            duration_ms,
            f" error={error}" if error else "",
        )
        if self._recorder is not None:
            try:
                self._recorder.record_tool_call(
                    ToolCallRecord(
                        user_id=ctx.user_id,
                        session_id=ctx.session_id,
                        call_id=request.id,
                        tool=request.name,
                        arguments=request.arguments,
                        ok=error is None,
                        result=full,
                        error=error,
                        duration_ms=duration_ms,
                    )
                )
            except Exception:
                log.exception("could not record tool call %s", request.id)
        return ToolOutcome(request.id, request.name, error is None, content, duration_ms, error)

    def _page(self, request: ToolCallRequest, ctx: ToolContext, content: str, untrusted: bool) -> str:
        """The first page of a long result and its handle; the whole is stored (cut without a store)."""
        if self.results is not None:
            try:
                handle = self.results.store(
                    user_id=ctx.user_id,
                    session_id=ctx.session_id,
                    tool=request.name,
                    call_id=request.id,
                    text=content,
                    untrusted=untrusted,
                )
            except Exception:
                log.exception("could not store the long result of %s", request.id)
            else:
                page = self.page_chars
                paged: dict[str, Any] = {"paged": True, "handle": handle, "total_chars": len(content)}
                if untrusted:
                    paged["untrusted_external_content"] = True
                paged["note"] = READ_ON_NOTE.format(
                    page=page, total=len(content), handle=handle, next_offset=page
                )
                paged.update(offset=0, next_offset=page, page=content[:page])
                return json.dumps(paged, ensure_ascii=False)
        cut = len(content) - self.max_result_chars
        return content[: self.max_result_chars] + f"\n[... {cut} more characters cut ...]"

    async def _run(self, request: ToolCallRequest, ctx: ToolContext) -> Any:
        tool = self._tools.get(request.name)
        if tool is None:
            raise ToolError(
                f"unknown tool {request.name!r}; available tools: {', '.join(self._tools) or 'none'}"
            )
        raw = request.arguments.strip() or "{}"
        try:
            args = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ToolError(f"the arguments are not valid JSON ({exc.msg} at position {exc.pos})") from None
        if not isinstance(args, dict):
            raise ToolError("the arguments must be a JSON object")
        if tool.input_schema is not None:
            # A schema we did not write: checked in a worker thread, with linear-time regular expressions
            # and a deadline, so neither its patterns nor its size can hold the event loop.
            try:
                problems = await asyncio.to_thread(check_arguments, tool.validator, args)
            except CheckTimeout:
                raise ToolError(
                    f"the arguments for {tool.name} could not be checked against its schema within "
                    f"{CHECK_SECONDS:.0f} s; the schema is too complex"
                ) from None
            if problems:
                raise ToolError(f"invalid arguments for {tool.name}: {'; '.join(problems)}")
            async with asyncio.timeout(tool.timeout_s):
                return await tool.fn(ctx, args)
        assert tool.args_model is not None
        try:
            parsed = tool.args_model.model_validate(args)
        except ValidationError as exc:
            raise ToolError(f"invalid arguments for {tool.name}: {_validation_message(exc)}") from None
        kwargs = {k: getattr(parsed, k) for k in type(parsed).model_fields}
        async with asyncio.timeout(tool.timeout_s):
            return await tool.fn(ctx, **kwargs)
