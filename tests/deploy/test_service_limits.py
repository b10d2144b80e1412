"""What a client without the token can make a sandbox service on TCP spend: real service processes on
127.0.0.1 flooded with idle and oversized connections, while a client with the token still gets its run."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from core_tools.sandbox import Isolation, detect_isolation
from core_tools.sandbox.client import ServiceExecutor
from core_tools.sandbox.protocol import PREAUTH_MAX_BYTES
from tests.deploy.test_sandbox_pool import TOKEN, free_port, tcp_exchange
from tests.deploy.test_service import REPO

ISOLATION, REASON = detect_isolation()
pytestmark = [
    pytest.mark.slow,  # sandbox service processes
    pytest.mark.skipif(ISOLATION is not Isolation.BWRAP, reason=f"no working bwrap: {REASON}"),
]
MIB = 1024 * 1024


class Flooded:
    """One TCP service process, its descriptors limited as a container may limit them."""

    def __init__(self, *args: str, open_files: int | None = None) -> None:
        self.port = free_port()

        def limit() -> None:
            if open_files is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (open_files, open_files))

        self.proc = subprocess.Popen(
            [sys.executable, "-m", "core_tools.sandbox.service", "--listen", f"127.0.0.1:{self.port}", *args],
            cwd=REPO,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "CODE_SANDBOX_TOKEN": TOKEN},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            preexec_fn=limit,  # only setrlimit, before exec
        )
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"service exited: {self.proc.stdout.read() if self.proc.stdout else ''}")
            try:
                self.hello()
                break
            except OSError:
                assert time.monotonic() < deadline, "service did not come up"
                time.sleep(0.1)

    @property
    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def hello(self) -> dict[str, object]:
        return tcp_exchange(self.port, {"op": "hello", "token": TOKEN})

    def memory_kb(self, field: str) -> int:
        """VmRSS (now) or VmHWM (the peak so far) of the service process, from /proc."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
        raise AssertionError(f"no {field} in /proc/{self.proc.pid}/status")

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=30)
        return out


@pytest.fixture
def flooded() -> Iterator[Callable[..., Flooded]]:
    started: list[Flooded] = []

    def _start(*args: str, open_files: int | None = None) -> Flooded:
        service = Flooded("--timeout", "10", *args, open_files=open_files)
        started.append(service)
        return service

    yield _start
    for service in started:
        service.stop()


def read_until_closed(sock: socket.socket, timeout: float = 60.0) -> tuple[bytes, bool]:
    """What the service sent until it closed the connection, and whether it did close it (a reset counts)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        return data, False
    return data, True


async def test_idle_connections_cannot_starve_a_client_with_the_token(
    flooded: Callable[..., Flooded],
) -> None:
    """1,100 idle connections exhausted the service's descriptors and a legitimate client got no answer;
    here 300 against a cap of 64 and a limit of 200 descriptors."""
    service = flooded("--max-connections", "64", open_files=200)
    idle = [socket.create_connection(("127.0.0.1", service.port)) for _ in range(300)]
    try:
        result = await ServiceExecutor(service.url, token=TOKEN).run("print('served')")
        assert result.success and result.stdout == "served\n"
        state = service.hello()
        assert int(str(state["connections"])) <= 64
        assert int(str(state["refused_connections"])) >= 300 - 64
        # The oldest idle ones made room, each told why before it was closed.
        for sock in idle[:100]:
            data, closed = read_until_closed(sock)
            assert closed
            answer = json.loads(data.splitlines()[0])
            assert answer["ok"] is False and answer["kind"] == "busy", answer
            assert "at most 64 connections" in str(answer["error"])
    finally:
        for sock in idle:
            sock.close()


async def test_every_connection_held_by_a_client_means_a_clear_refusal(
    flooded: Callable[..., Flooded],
) -> None:
    service = flooded("--max-concurrent", "1", "--max-connections", "3")
    slow = [
        asyncio.create_task(
            ServiceExecutor(service.url, token=TOKEN).run("import time; time.sleep(3); print(1)")
        )
        for _ in range(2)
    ]
    while (state := service.hello())["running"] != 1 or state["waiting"] != 1:
        assert not any(t.done() for t in slow), [t.result() for t in slow if t.done()]
        await asyncio.sleep(0.05)
    # A third client has sent its token and not yet its request: all three connections are clients'.
    with socket.create_connection(("127.0.0.1", service.port)) as third:
        third.sendall(json.dumps({"op": "auth", "token": TOKEN}).encode() + b"\n")
        assert json.loads(third.makefile("rb").readline()) == {"ok": True, "op": "auth"}
        with socket.create_connection(("127.0.0.1", service.port)) as fourth:
            data, closed = read_until_closed(fourth)
    answer = json.loads(data)
    assert closed and answer["kind"] == "busy" and "3 connections, its limit" in str(answer["error"])
    assert [r.stdout for r in await asyncio.gather(*slow)] == ["1\n", "1\n"]


async def test_unauthenticated_bytes_are_cut_off_and_memory_stays_bounded(
    flooded: Callable[..., Flooded],
) -> None:
    """1,000 unauthenticated connections sending 512 KB without a newline held 587 MB for 30 s each."""
    service = flooded()
    warm = ServiceExecutor(service.url, token=TOKEN)
    assert (await warm.run("print('warm')")).stdout == "warm\n"
    before = service.memory_kb("VmRSS")
    line = b"x" * (512 * 1024)  # no newline, no token

    # One such line is cut off at the pre-auth limit and its connection closed, with the reason.
    with socket.create_connection(("127.0.0.1", service.port)) as sock:
        with contextlib.suppress(OSError):  # closed while this was still sending: what is expected
            sock.sendall(line)
        data, closed = read_until_closed(sock, timeout=20)
    assert closed, "the connection is closed by the service, not left waiting for a newline"
    if data:  # the reason, unless the service's close reset the connection before it was read
        answer = json.loads(data.splitlines()[0])
        assert answer["kind"] == "unauthorized" and f"first {PREAUTH_MAX_BYTES} bytes" in str(answer["error"])
    assert int(str(service.hello()["refused_connections"])) >= 1

    # Three hundred of them at once: the service's memory stays about where it was.
    flood = []
    for _ in range(300):
        sock = socket.create_connection(("127.0.0.1", service.port))
        with contextlib.suppress(OSError):
            sock.sendall(line)
        flood.append(sock)
    try:
        result = await ServiceExecutor(service.url, token=TOKEN).run("print('still served')")
        assert result.stdout == "still served\n"
        grown_mb = (service.memory_kb("VmHWM") - before) / 1024
        assert grown_mb < 48, f"the service's peak memory grew by {grown_mb:.0f} MB"
    finally:
        for sock in flood:
            sock.close()
