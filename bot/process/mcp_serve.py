"""`python -m bot mcp --user-id ID [--http HOST:PORT] [--tools a,b]`: our tools served over MCP as one user.

The settings (the same .env as the bot) are read by bot/__main__.py, as for every command; this module checks
the arguments, builds the services and serves until the client goes (stdio) or a signal (HTTP).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from bot.config.settings import Settings
from bot.process.upgrade.errors import UpgradeFailed
from core_tools.mcp.config import SERVED_TOOLS  # no SDK import: every `python -m bot` builds this parser

DENIED = "denied by the user"  # core_tools.approval.DENIED, without importing it at every start

if TYPE_CHECKING:
    from core_tools.approval import ApprovalGate, ApprovalRequest
    from core_tools.types import ToolCallRequest
    from db.approvals import Approvals

log = logging.getLogger("bot.mcp")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The `mcp` command's arguments."""
    parser.add_argument("--user-id", type=int, required=True, help="the Telegram user id to act as")
    parser.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve Streamable HTTP at http://HOST:PORT/mcp (needs MCP_SERVER_TOKEN) instead of stdio",
    )
    parser.add_argument(
        "--tools",
        metavar="A,B",
        help=f"serve only these tools (default: {','.join(SERVED_TOOLS)}); any tool the bot registers "
        "may be named",
    )


def _host_port(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--http wants HOST:PORT, e.g. 127.0.0.1:8765, not {value!r}")
    return host.strip("[]"), int(port)


def tool_names(value: str | None) -> tuple[str, ...]:
    """The names of `--tools a,b` in order, without repeats; the default set when not given."""
    if value is None:
        return SERVED_TOOLS
    names = tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))
    if not names:
        raise ValueError("--tools wants a comma-separated list of tool names, e.g. --tools code,memory")
    return names


class UnknownTools(ValueError):
    """`--tools` named a tool the bot does not have."""


# What the MCP client's form asks for: one choice (issue 31 §17: APPROVE_TOOLS applies here too).
DECISION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "decision": {
            "type": "string",
            "title": "Decision",
            "description": "approve: run it once; deny: do not run it; always: run it and do not ask again",
            "enum": ["approve", "deny", "always"],
        }
    },
    "required": ["decision"],
}


class ElicitAsker:
    """The approval gate's Asker for one MCP call on a connection that can send the client requests (the
    handshake protocol versions): the question goes as an elicitation (a form with one choice), and its
    answer is stored as a button press is (db/approvals.py)."""

    def __init__(self, session: Any, related_request_id: Any, store: Approvals, timeout_s: float) -> None:
        self.session = session
        self.related_request_id = related_request_id
        self.store = store
        self.timeout_s = timeout_s

    async def ask(self, request: ApprovalRequest) -> int | None:
        """Ask the client and store its answer; no answer within the gate's timeout is a "timeout"."""
        try:
            result = await asyncio.wait_for(
                self.session.elicit_form(
                    question(request.tool, request.summary), DECISION_SCHEMA, self.related_request_id
                ),
                self.timeout_s,
            )
        except TimeoutError:
            self.store.decide(request.id, "timeout", None)
            return None
        status, always = decision(result)
        self.store.decide(request.id, status, request.user_id, always=always)
        return None

    async def settled(self, request: ApprovalRequest, message_id: int | None, status: str) -> None:
        """Nothing stays on the client's screen to take away."""

    async def tell(self, chat_id: int, text: str) -> None:
        """No scheduled task runs in the MCP server."""


def question(tool: str, summary: str) -> str:
    """What the client shows the user."""
    return f"May I run {tool}?\n\n{summary}"


def decision(result: Any) -> tuple[str, bool]:
    """The stored decision of an elicitation's result, and whether it is "always"."""
    choice = (result.content or {}).get("decision") if result.action == "accept" else None
    if choice in ("approve", "always"):
        return "approved", choice == "always"
    return "denied", False  # declined, dismissed, or "deny"


STATE = "approval:"  # the request state of a call waiting for its answer: "approval:<id>"


def approver(gate: ApprovalGate, registry: Any, user_id: int) -> Callable[[Any, Any, Any], Awaitable[Any]]:
    """The MCP server's check before a call: APPROVE_TOOLS (and MCP `confirm`) as in the user's private
    chat, asked through the client when it supports elicitation, refused with a clear error when not.

    On a connection that can send the client requests the call waits for the elicitation's answer; on the
    2026-07-28 protocol (no server requests) the call answers "input required" with the elicitation, and
    the client's retry carries the answer and the request's id (checked: this user's pending request of
    this very call)."""
    import mcp_types as types

    from core_tools.approval import summarize

    can_ask = types.ClientCapabilities(elicitation=types.ElicitationCapability())
    store = gate.store

    async def approve(ctx: Any, params: Any, call: ToolCallRequest) -> Any:
        tool = registry.get(call.name)
        if not gate.policy.needs(call.name, tool):
            return None
        if store.allowed_always(user_id, call.name, user_id):  # "Always" in the private chat
            return None
        if not ctx.session.check_client_capability(can_ask):
            return (
                f"not run: {call.name} needs the user's approval (APPROVE_TOOLS), and this MCP client "
                "cannot ask for it (it does not support elicitation); use a client that does, or run the "
                "tool from Telegram"
            )
        if ctx.session.can_send_request:
            asker = ElicitAsker(ctx.session, ctx.request_id, store, gate.timeout_s)
            return await gate.check(call, tool, chat_id=user_id, user_id=user_id, purpose="mcp", asker=asker)
        summary = summarize(call.arguments, gate.secrets)
        answer = (params.input_responses or {}).get("approval")
        state = params.request_state or ""
        if answer is not None and state.startswith(STATE) and state[len(STATE) :].isascii():
            head = state[len(STATE) :]
            row = store.get(int(head)) if head.isdigit() and len(head) <= 10 else None
            if (
                row is not None
                and row.status == "pending"
                and (row.user_id, row.chat_id, row.tool, row.summary)
                == (user_id, user_id, call.name, summary)
                and isinstance(answer, types.ElicitResult)
            ):
                status, always = decision(answer)
                if store.decide(row.id, status, user_id, always=always) and status == "approved":
                    return None
                return f"{DENIED}: the call was not run; do not try it again unless the user asks"
            return "not run: that approval is no longer open; call the tool again to be asked"
        approval_id = store.ask(user_id, user_id, call.name, summary)
        form = types.ElicitRequestFormParams(
            message=question(call.name, summary), requested_schema=DECISION_SCHEMA
        )
        return types.InputRequiredResult(
            input_requests={"approval": types.ElicitRequest(params=form)},
            request_state=f"{STATE}{approval_id}",
        )

    return approve


def run(settings: Settings, args: argparse.Namespace) -> int:
    """Check the arguments against the settings, then serve; 2 with one line on stderr when it cannot."""
    try:
        http = _host_port(args.http) if args.http else None
        tools = tool_names(args.tools)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    token = settings.mcp_server_token.get_secret_value() if settings.mcp_server_token else ""
    if http is not None and not token:
        print(
            "error: --http needs MCP_SERVER_TOKEN: clients must send it as a bearer token "
            "(generate one with `openssl rand -hex 32`)",
            file=sys.stderr,
        )
        return 2
    if args.user_id not in (settings.allowed_user_ids or []):
        print(f"error: user {args.user_id} is not in ALLOWED_USER_IDS", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(settings, args.user_id, http, token, tools))
    except UnknownTools as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except UpgradeFailed as exc:  # a database behind this code whose checked upgrade failed
        print(exc.line(), file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"Configuration error: {exc}.", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


async def _serve(
    settings: Settings, user_id: int, http: tuple[str, int] | None, token: str, tools: tuple[str, ...]
) -> None:
    from bot.process import heap
    from bot.process.upgrade.start import ensure_schema
    from bot.process.wiring import build_services
    from core_tools.mcp.server import UserGate, build_server, serve_http, serve_stdio

    ensure_schema(settings)  # a database behind this code: the checked upgrade (UpgradeFailed)
    services = build_services(settings)
    try:
        registry = services.registry
        unknown = [t for t in tools if t not in registry.names]
        if unknown:
            raise UnknownTools(
                f"--tools: no tool named {', '.join(map(repr, unknown))}; the bot has: "
                f"{', '.join(sorted(registry.names))}"
            )
        conv = services.conversations
        conv.ensure_user(user_id, None, None)

        def session_for(uid: int) -> str:
            return conv.current_session(uid, uid, chat_type="private").id

        approve = approver(services.approvals, registry, user_id) if services.approvals is not None else None
        gate = UserGate(user_id, session_for, services.usage_service.over_budget, approve)
        server = build_server(registry, gate, tools)
        heap.settle()
        if http is None:
            log.info("MCP server on stdio as user %d: %s", user_id, ", ".join(tools))
            await serve_stdio(server)
        else:
            await serve_http(server, http[0], http[1], token)
    finally:
        await services.aclose()
