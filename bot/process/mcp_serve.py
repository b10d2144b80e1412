"""`python -m bot mcp --user-id ID [--http HOST:PORT] [--tools a,b]`: our tools served over MCP as one user.

The settings (the same .env as the bot) are read by bot/__main__.py, as for every command; this module checks
the arguments, builds the services and serves until the client goes (stdio) or a signal (HTTP).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from bot.process.settings import Settings
from core_tools.mcp.config import SERVED_TOOLS  # no SDK import: every `python -m bot` builds this parser

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
    from bot.process.wiring import build_services
    from core_tools.mcp.server import UserGate, build_server, serve_http, serve_stdio

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

        gate = UserGate(user_id, session_for, services.usage_service.over_budget)
        server = build_server(registry, gate, tools)
        heap.settle()
        if http is None:
            log.info("MCP server on stdio as user %d: %s", user_id, ", ".join(tools))
            await serve_stdio(server)
        else:
            await serve_http(server, http[0], http[1], token)
    finally:
        await services.aclose()
