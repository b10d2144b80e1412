"""The code sandbox as its own process: a `LocalExecutor` served on a unix socket or TCP.

Used by the compose deployment, where the sandbox runs in a container that holds no secrets, no database
and no network, and the bot reaches it over a socket on a shared volume. Each run is still isolated with
bwrap inside that container, exactly as on a host. Several services on other machines are reached over
TCP with a shared token (core_tools/sandbox/pool.py spreads runs over them).

The wire protocol is in protocol.py, the server in server.py, the bot's client in client.py; this module is
only the program (its command line, `serve` and the `--ping` health check).

Entry point: `python -m core_tools.sandbox.service --socket /run/sandbox/sandbox.sock [--allow-unsandboxed]
[--max-concurrent 8] [--max-connections N] [--max-files-in-mb 32] [--ahead 1]`, or `--listen 0.0.0.0:8700`
with the token in the environment variable `CODE_SANDBOX_TOKEN` (never on the command line, where `ps` shows
it); `--ping` asks a running service for its hello and exits 0 if it answered and can isolate code (or runs
unsandboxed because `--allow-unsandboxed` says so), else 1 with one line naming the cause (the container's
health check).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from typing import Any

from core_tools.sandbox.client import ServiceInfo, blocking_exchange
from core_tools.sandbox.client import reason as failure_reason
from core_tools.sandbox.executor import LocalExecutor, describe
from core_tools.sandbox.guardian import Guardian
from core_tools.sandbox.model import Isolation, SandboxLimits
from core_tools.sandbox.protocol import encode, parse_address
from core_tools.sandbox.runs import USERNS_HINT
from core_tools.sandbox.server import (
    DEFAULT_MAX_FILES_IN_MB,
    SHUTDOWN_GRACE_S,
    SandboxService,
    default_max_connections,
)

log = logging.getLogger("core_tools.sandbox.service")  # not "__main__" when run with -m

DEFAULT_SOCKET = "/run/sandbox/sandbox.sock"


# --- entry point -----------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m core_tools.sandbox.service",
        description="Serve the code sandbox on a unix socket (one JSON request line, one JSON answer line).",
    )
    parser.add_argument(
        "--socket", default=None, help=f"socket path (default {DEFAULT_SOCKET} unless --listen)"
    )
    parser.add_argument(
        "--listen", default=None, help="also (or only) serve on TCP HOST:PORT; needs CODE_SANDBOX_TOKEN"
    )
    parser.add_argument("--max-concurrent", type=int, default=8, help="runs at once (default 8)")
    parser.add_argument(
        "--max-connections",
        type=int,
        default=None,
        help="connections held at once (default 5 x max-concurrent + 24); the oldest that has not sent its "
        "request makes room for a new one",
    )
    parser.add_argument(
        "--max-files-in-mb",
        type=int,
        default=DEFAULT_MAX_FILES_IN_MB,
        help=f"the user's files one run may get under in/, in all (default {DEFAULT_MAX_FILES_IN_MB})",
    )
    parser.add_argument("--queue-timeout", type=float, default=60.0, help="seconds a run waits for a slot")
    parser.add_argument("--timeout", type=float, default=30.0, help="default wall clock of a run, seconds")
    parser.add_argument("--max-timeout", type=float, default=120.0, help="largest wall clock a run may ask")
    parser.add_argument("--memory-mb", type=int, default=512, help="memory limit of a run (default 512)")
    parser.add_argument(
        "--ahead",
        type=int,
        default=1,
        help="sandboxes kept started, waiting for their program, per kind of run used lately (default 1; "
        "0: each run starts its own)",
    )
    parser.add_argument("--socket-mode", default="660", help="octal mode of the socket file (default 660)")
    parser.add_argument("--allow-unsandboxed", action="store_true", help="run without isolation if no bwrap")
    parser.add_argument(
        "--python-env",
        default="/opt/assistant-sandbox",
        help="the data toolkit's environment (numpy, pandas, matplotlib), used when it exists",
    )
    parser.add_argument(
        "--ping", action="store_true", help="health check: exit 0 if it answers and can isolate, else 1"
    )
    return parser


def _listen_address(value: str | None) -> tuple[str, int] | None:
    if value is None:
        return None
    address = parse_address(f"tcp://{value}")
    assert isinstance(address, tuple)
    return address


async def serve(args: argparse.Namespace, token: str | None = None) -> None:
    """Run the service until SIGTERM or SIGINT."""
    limits = SandboxLimits(timeout_s=args.timeout, max_timeout_s=args.max_timeout, memory_mb=args.memory_mb)
    executor = LocalExecutor(
        limits, allow_unsandboxed=args.allow_unsandboxed, python_env=args.python_env, ahead=args.ahead
    )
    # Kills what is left of every run if this process dies; started before any socket exists.
    guardian = Guardian(os.getpid(), executor.run_parent.path if executor.run_parent else None)
    executor.guardian = guardian
    try:
        service = SandboxService(
            executor,
            args.socket or "",
            max_concurrent=args.max_concurrent,
            queue_timeout_s=args.queue_timeout,
            socket_mode=int(args.socket_mode, 8),
            listen=_listen_address(args.listen),
            token=token,
            max_files_in_bytes=args.max_files_in_mb * 1024 * 1024,
            max_connections=args.max_connections,
        )
        await service.start()
        where = " and ".join(
            x for x in (args.socket, f"tcp port {service.tcp_port}" if args.listen else None) if x
        )
        line = f"{describe(executor)}; serving on {where}, {args.max_concurrent} runs at once, "
        line += f"at most {service.max_connections} connections"
        line += f"; runs die with this service (guardian pid {guardian.pid})"
        if executor.isolation is Isolation.UNAVAILABLE:
            line += f"; every run will be refused: {USERNS_HINT}"
        log.info("%s", line)
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        await stopping.wait()
        log.info("stopping: waiting up to %g s for running code", SHUTDOWN_GRACE_S)
        await service.stop()
    finally:
        await executor.aclose()  # the sandboxes started ahead go too
        await asyncio.to_thread(guardian.close)  # every run is stopped by now: it finds nothing to kill


def ping(socket_path: str, token: str | None = None) -> int:
    """The health check: 0 if the service answers and can isolate code (or was told to run unsandboxed).

    A service that answers but would refuse every run is not healthy: the one line printed names the cause.
    `socket_path` may be `tcp://host:port` (then with the token).
    """
    hello: dict[str, Any] = {"op": "hello"} if token is None else {"op": "hello", "token": token}
    try:
        answer = blocking_exchange(parse_address(socket_path), encode(hello), 5.0)
        if answer.get("kind") == "unauthorized":
            print(
                f"sandbox service at {socket_path} refused the token: {answer.get('error')}", file=sys.stderr
            )
            return 1
        info = ServiceInfo.from_hello(answer)
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        print(f"sandbox service at {socket_path} is not answering: {failure_reason(exc)}", file=sys.stderr)
        return 1
    if info.isolation is Isolation.UNAVAILABLE:
        reason = " ".join(str(answer.get("isolation_reason") or "no reason given").split())
        print(
            f"sandbox service at {socket_path} cannot isolate code, every run is refused: {reason} "
            "(see deploy/README.md)",
            file=sys.stderr,
        )
        return 1
    print(info.describe)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and serve (or ping)."""
    args = _parser().parse_args(argv)
    # Its own program: the shared secret comes from the environment, never from argv (visible in `ps`).
    token = os.environ.get("CODE_SANDBOX_TOKEN") or None
    if args.listen is not None and token is None:
        print("error: --listen (TCP) needs the shared token in CODE_SANDBOX_TOKEN", file=sys.stderr)
        return 2
    if args.socket is None and args.listen is None:
        args.socket = DEFAULT_SOCKET
    try:
        _listen_address(args.listen)
    except ValueError as exc:
        print(f"error: --listen: {exc}", file=sys.stderr)
        return 2
    if args.ping:
        target = args.socket if args.socket else f"tcp://{args.listen}"
        return ping(target, token)
    if (
        args.max_concurrent < 1
        or args.timeout <= 0
        or args.max_timeout <= 0
        or args.max_files_in_mb < 0
        or args.ahead < 0
    ):
        print(
            "error: --max-concurrent, --timeout and --max-timeout must be positive, --max-files-in-mb and "
            "--ahead not negative",
            file=sys.stderr,
        )
        return 2
    if args.max_connections is not None and args.max_connections <= args.max_concurrent:
        print(
            f"error: --max-connections must be above --max-concurrent (default "
            f"{default_max_connections(args.max_concurrent)})",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(serve(args, token))
    except (RuntimeError, OSError) as exc:  # a live service on the socket, or a non-socket file in the way
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
