"""MCP server: our tools (by default search, fetch, code, memory, read_result) to any MCP client, as one user.

`python -m bot mcp` runs it (bot/mcp_serve.py: the settings and the services are bot/'s to build).

Each call goes through the same registry choke point as a Telegram turn (validation, timeout, tool-call
log, paging of long results), in the user's private session, with their caps, sandbox and memory.
"""

from __future__ import annotations

import hmac
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server

from core_tools.mcp.config import SERVED_TOOLS
from core_tools.registry import ToolRegistry
from core_tools.types import ToolCallRequest, ToolContext

log = logging.getLogger(__name__)


Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class UserGate:
    """Who the server acts as, and whether they may use tools now (usage caps)."""

    def __init__(
        self,
        user_id: int,
        session_for: Callable[[int], str],
        over_budget: Callable[[int], str | None] | None = None,
        approve: Callable[[Any, Any, ToolCallRequest], Awaitable[Any]] | None = None,
    ) -> None:
        self.user_id = user_id
        self.session_for = session_for
        self.over_budget = over_budget
        # Whether a call may run (the request's context and params, the call): None; why not (a text);
        # or the result to answer with meanwhile (an InputRequiredResult: the user is being asked).
        self.approve = approve

    def context(self) -> ToolContext:
        """The tool context of one call: the user's private chat and its open session."""
        return ToolContext(
            user_id=self.user_id,
            chat_id=self.user_id,
            session_id=self.session_for(self.user_id),
            trigger_message="(a call from an MCP client)",
        )


def build_server(
    registry: ToolRegistry, gate: UserGate, tools: tuple[str, ...] = SERVED_TOOLS
) -> Server[Any]:
    """A low-level MCP server over `registry`'s tools named in `tools` (those registered).

    The schemas are read at each listing: a tool registered again (the code tool, when the sandbox's
    toolkit changes) is offered as it is now, with the user's notes.
    """

    def schemas() -> dict[str, dict[str, Any]]:
        # The user's notes on tools (the code tool's lessons) too, as in their Telegram turns.
        by_name = {s["function"]["name"]: s["function"] for s in registry.schemas_for(gate.user_id)}
        return {name: by_name[name] for name in tools if name in by_name}

    async def list_tools(_ctx: Any, _params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=name,
                    description=s["description"],
                    input_schema=s["parameters"],
                    **_capability_fields(registry, name),
                )
                for name, s in schemas().items()
            ]
        )

    async def call_tool(
        ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult | types.InputRequiredResult:
        offered = schemas()
        if params.name not in offered:
            return _error(f"unknown tool {params.name!r}; available: {', '.join(offered)}")
        refusal = gate.over_budget(gate.user_id) if gate.over_budget is not None else None
        if refusal is not None:
            return _error(refusal)
        request = ToolCallRequest(
            f"mcp-{uuid.uuid4().hex[:12]}",
            params.name,
            json.dumps(params.arguments or {}, ensure_ascii=False),
        )
        held = await gate.approve(ctx, params, request) if gate.approve is not None else None
        if isinstance(held, str):
            return _error(held)
        if held is not None:
            return held  # type: ignore[no-any-return]
        outcome = await registry.call(request, gate.context())
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=outcome.content)], is_error=not outcome.ok
        )

    return Server(
        "telegram-assistant",
        version="0.1.0",
        instructions="The assistant's tools, acting as one of its users: web search and fetch, sandboxed "
        "code, layered memory, and read_result for long results.",
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def _capability_fields(registry: ToolRegistry, name: str) -> dict[str, Any]:
    """What the tool reads and writes, for an MCP client: in `_meta` as {"capabilities": {"reads": [...],
    "writes": [...]}} and as the standard hints (read-only when it writes nothing; open world when it
    touches the internet or another system)."""
    tool = registry.get(name)
    caps = tool.capabilities if tool is not None else None
    if caps is None:
        return {}
    touched = caps.reads | caps.writes
    return {
        "annotations": types.ToolAnnotations(
            read_only_hint=not caps.writes,
            destructive_hint=bool(caps.writes),
            open_world_hint=bool(touched & {"internet", "external"}),
        ),
        "meta": {"capabilities": caps.as_dict()},
    }


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


async def serve_stdio(server: Server[Any]) -> None:
    """Serve one client over stdin/stdout until it disconnects."""
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def require_bearer(app: ASGIApp, token: str) -> ASGIApp:
    """Wrap an ASGI app: HTTP requests without `Authorization: Bearer <token>` get 401 and go no further."""
    expected = f"Bearer {token}".encode()

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            if not hmac.compare_digest(
                given, expected
            ):  # constant time: the token is not guessable by timing
                body = json.dumps({"error": "missing or wrong bearer token"}).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"www-authenticate", b'Bearer realm="mcp"'),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


async def serve_http(server: Server[Any], host: str, port: int, token: str) -> None:
    """Serve Streamable HTTP on host:port at /mcp, every request checked against the bearer token."""
    import uvicorn  # only the HTTP mode needs it (a dependency of the mcp SDK)

    if not token:
        raise ValueError("the HTTP server needs a bearer token")
    app = server.streamable_http_app(host=host)
    config = uvicorn.Config(require_bearer(app, token), host=host, port=port, log_level="warning")
    log.info("MCP server listening on http://%s:%d/mcp (bearer token required)", host, port)
    await uvicorn.Server(config).serve()
