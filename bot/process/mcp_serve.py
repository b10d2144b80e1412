"""`python -m core_tools.mcp --user-id ID [--http HOST:PORT]`: our tools served over MCP as one user.

The settings (the same .env as the bot) are read here, in bot/, which owns the environment; the module
`core_tools.mcp.__main__` only hands over to `main`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys

from bot.process.logs import setup_logging
from bot.process.settings import Settings, describe_errors, load_settings
from core_tools.mcp.server import UserGate, build_server, serve_http, serve_stdio

log = logging.getLogger("bot.mcp")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m core_tools.mcp",
        description="Serve the assistant's tools (search, fetch, code, memory, read_result) over MCP, as one "
        "user: the same sandbox, execution log, memory, caps and accounting as in Telegram.",
    )
    parser.add_argument("--user-id", type=int, required=True, help="the Telegram user id to act as")
    parser.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve Streamable HTTP at http://HOST:PORT/mcp (needs MCP_SERVER_TOKEN) instead of stdio",
    )
    return parser


def _host_port(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--http wants HOST:PORT, e.g. 127.0.0.1:8765, not {value!r}")
    return host.strip("[]"), int(port)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, check settings, serve until the client goes (stdio) or a signal (HTTP)."""
    args = _parser().parse_args(argv)
    try:
        settings: Settings = load_settings()
    except Exception as err:  # pydantic.ValidationError: one line per bad setting
        lines = describe_errors(err) if hasattr(err, "errors") else [str(err)]  # type: ignore[arg-type]
        for line in lines:
            print(line, file=sys.stderr)
        return 2
    http: tuple[str, int] | None = None
    try:
        if args.http:
            http = _host_port(args.http)
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
    allowed = settings.allowed_user_ids or []
    if args.user_id not in allowed:
        print(f"error: user {args.user_id} is not in ALLOWED_USER_IDS", file=sys.stderr)
        return 2
    setup_logging(settings.log_level, settings.secrets())
    for handler in logging.getLogger().handlers:  # stdout is the protocol channel in stdio mode
        if isinstance(handler, logging.StreamHandler):
            handler.setStream(sys.stderr)
    try:
        asyncio.run(_serve(settings, args.user_id, http, token))
    except ValueError as exc:
        print(f"Configuration error: {exc}.", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


async def _serve(settings: Settings, user_id: int, http: tuple[str, int] | None, token: str) -> None:
    from bot.process.wiring import build_services

    services = build_services(settings)
    try:
        conv = services.conversations
        conv.ensure_user(user_id, None, None)

        def session_for(uid: int) -> str:
            return conv.current_session(uid, uid, chat_type="private").id

        gate = UserGate(user_id, session_for, services.usage_service.over_budget)
        server = build_server(services.registry, gate)
        if http is None:
            log.info("MCP server on stdio as user %d", user_id)
            await serve_stdio(server)
        else:
            await serve_http(server, http[0], http[1], token)
    finally:
        await services.aclose()
