"""Helpers for the MCP tests: the probe server's command, a free port, waiting for a condition."""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

PROBE = str(Path(__file__).with_name("probe_server.py"))
ROOT = str(Path(__file__).resolve().parents[3])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stdio_entry(**extra: object) -> dict[str, object]:
    return {"command": sys.executable, "args": [PROBE], **extra}


async def until(predicate: Callable[[], bool], timeout: float = 15.0, what: str = "condition") -> None:
    """Wait until `predicate()` holds (polled), or fail naming `what`."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


def wait_port(port: int, proc: subprocess.Popen[bytes] | None = None, timeout: float = 120.0) -> None:
    """Wait until something listens on `port`; fail at once, with its error output, if `proc` ends first.
    (The bound is generous: a bot process starting on a loaded two-core machine took over 20 s.)"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if proc is not None and proc.poll() is not None:
            err = proc.stderr.read().decode(errors="replace")[-2000:] if proc.stderr else ""
            raise AssertionError(f"the process ended ({proc.returncode}) before listening on {port}: {err}")
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port} after {timeout:.0f} s")


@contextmanager
def process(
    args: list[str], port: int | None = None, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A subprocess (waited for its port, when given), ended afterwards."""
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        if port is not None:
            wait_port(port, proc)
        yield proc
    finally:
        proc.terminate()
        try:
            # uvicorn's graceful stop waits for open streams, and a client still connected keeps its
            # subscription open: the test is over, so do not wait for it long.
            proc.wait(2)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


HEAVY = str(Path(__file__).with_name("heavy_server.py"))


def heavy_entry(**extra: object) -> dict[str, object]:
    """The server of tests/support/mcp_servers/heavy_server.py: a 4 MB schema and a backtracking pattern."""
    return {"command": sys.executable, "args": [HEAVY], **extra}


CHANGING = str(Path(__file__).with_name("changing_server.py"))


def changing_entry(pid_file: Path, **extra: object) -> dict[str, object]:
    """The server of tests/support/mcp_servers/changing_server.py, writing its process id to `pid_file`."""
    return {"command": sys.executable, "args": [CHANGING, "--pid-file", str(pid_file)], **extra}


LEGACY_CHANGING = str(Path(__file__).with_name("legacy_changing_server.py"))


def legacy_changing_entry(**extra: object) -> dict[str, object]:
    """The server of tests/support/mcp_servers/legacy_changing_server.py (2025 protocol, no SDK)."""
    return {"command": sys.executable, "args": [LEGACY_CHANGING], **extra}
