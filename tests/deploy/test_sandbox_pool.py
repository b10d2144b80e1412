"""Sandbox services on TCP with a shared token, and the bot's pool over several: real service processes on
127.0.0.1, real bwrap runs; a run goes elsewhere only when its service vanished before the code started."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from core_tools.errors import ToolError
from core_tools.sandbox import Isolation, detect_isolation
from core_tools.sandbox import client as client_module
from core_tools.sandbox.client import ServiceExecutor
from core_tools.sandbox.model import FileLimits
from core_tools.sandbox.pool import SandboxPool
from tests.bot.test_stop import processes_with
from tests.deploy.test_service import REPO
from tests.support.fakes.openai_api import FakeLLM, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, running_bot

ISOLATION, REASON = detect_isolation()
pytestmark = [
    pytest.mark.slow,  # sandbox service processes
    pytest.mark.skipif(ISOLATION is not Isolation.BWRAP, reason=f"no working bwrap: {REASON}"),
]
TOKEN = "pool-test-token-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tcp_exchange(port: int, message: dict[str, object], timeout: float = 5.0) -> dict[str, object]:
    """One request line to a TCP service, its last answer line ({} when it closed without one)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(json.dumps(message).encode() + b"\n")
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    lines = data.splitlines()
    answer: dict[str, object] = json.loads(lines[-1]) if lines else {}
    return answer


class TcpService:
    """One `python -m core_tools.sandbox.service --listen 127.0.0.1:PORT` process."""

    def __init__(self, *args: str, token: str | None = TOKEN) -> None:
        self.port = free_port()
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
        if token is not None:
            env["CODE_SANDBOX_TOKEN"] = token
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "core_tools.sandbox.service", "--listen", f"127.0.0.1:{self.port}", *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    @property
    def url(self) -> str:
        return f"tcp://127.0.0.1:{self.port}"

    def wait_up(self) -> TcpService:
        deadline = time.monotonic() + 120  # a cold start on a loaded machine
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"service exited: {self.proc.stdout.read() if self.proc.stdout else ''}")
            try:
                self.hello()
                return self
            except OSError:
                time.sleep(0.1)
        raise AssertionError("service did not come up")

    def hello(self) -> dict[str, object]:
        return tcp_exchange(self.port, {"op": "hello", "token": TOKEN})

    async def state(self) -> dict[str, object]:
        """The hello, without blocking the event loop the runs under test need."""
        return await asyncio.to_thread(self.hello)

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=30)
        return out


@pytest.fixture
def services() -> Iterator[Callable[..., TcpService]]:
    started: list[TcpService] = []

    def _start(*args: str) -> TcpService:
        service = TcpService("--timeout", "10", "--max-timeout", "20", *args).wait_up()
        started.append(service)
        return service

    yield _start
    for service in started:
        service.stop()


async def test_tcp_needs_the_token(services: Callable[..., TcpService]) -> None:
    service = services()
    good = ServiceExecutor(service.url, token=TOKEN)
    result = await good.run("print(6 * 7)")
    assert result.stdout == "42\n" and good.isolation is Isolation.BWRAP
    for token in (None, "wrong"):
        bad = ServiceExecutor(service.url, token=token)
        assert bad.isolation is Isolation.UNAVAILABLE
        with pytest.raises(ToolError, match="refused the token: set the same CODE_SANDBOX_TOKEN"):
            await bad.run("print(1)")
    assert tcp_exchange(service.port, {"op": "run", "code": "print(1)"})["kind"] == "unauthorized"
    assert service.hello()["started"] == 1  # only the run with the token ran

    lone = TcpService(token=None)  # TCP without a token does not start
    assert lone.proc.wait(timeout=20) == 2
    assert (
        lone.proc.stdout is not None
        and "needs the shared token in CODE_SANDBOX_TOKEN" in lone.proc.stdout.read()
    )


async def test_pool_spreads_runs_and_skips_a_dead_service(services: Callable[..., TcpService]) -> None:
    a, b = services(), services()
    dead = f"tcp://127.0.0.1:{free_port()}"  # nothing listens there
    pool = SandboxPool([ServiceExecutor(u, token=TOKEN) for u in (dead, a.url, b.url)])
    assert pool.isolation is Isolation.BWRAP and "python" in pool.languages()
    assert "2 of 3 services up" in pool.describe() and "not reachable" in pool.describe()
    runs = [asyncio.create_task(pool.run("import time; time.sleep(1.5); print('ok')")) for _ in range(2)]
    # Both run at once, one on each live service; the dead one was tried and set aside.
    while not ((await a.state())["running"] == 1 and (await b.state())["running"] == 1):
        assert not any(r.done() for r in runs), [r.result() for r in runs if r.done()]
        await asyncio.sleep(0.05)
    assert [r.stdout for r in await asyncio.gather(*runs)] == ["ok\n", "ok\n"]
    assert a.hello()["started"] == 1 and b.hello()["started"] == 1


async def test_run_waiting_in_a_vanished_service_goes_to_the_next(
    services: Callable[..., TcpService],
) -> None:
    a = services("--max-concurrent", "1")
    b = services()
    # A's only slot is taken by another client's run, so the pool's run waits in A's queue, not started.
    blocker = asyncio.create_task(
        asyncio.to_thread(
            tcp_exchange, a.port, {"op": "run", "code": "import time; time.sleep(30)", "token": TOKEN}, 60
        )
    )
    while (await a.state())["running"] != 1:
        await asyncio.sleep(0.05)
    pool = SandboxPool([ServiceExecutor(a.url, token=TOKEN), ServiceExecutor(b.url, token=TOKEN)])
    pending = asyncio.create_task(pool.run("print('ran once')"))
    while (await a.state())["waiting"] != 1:
        await asyncio.sleep(0.05)
    a.proc.kill()  # A vanishes with the pool's run still in its queue
    result = await pending
    assert result.stdout == "ran once\n"
    assert b.hello()["started"] == 1
    assert await blocker == {}  # A's connection was cut: no answer line


async def test_a_started_run_is_never_sent_again(services: Callable[..., TcpService]) -> None:
    a, b = services(), services()
    pool = SandboxPool([ServiceExecutor(a.url, token=TOKEN), ServiceExecutor(b.url, token=TOKEN)])
    pending = asyncio.create_task(pool.run("import time; time.sleep(30)"))
    while (await a.state())["running"] != 1:
        await asyncio.sleep(0.05)
    a.proc.kill()  # A vanishes while the code runs
    with pytest.raises(ToolError, match="the run's outcome is unknown"):
        await pending
    assert b.hello()["started"] == 0  # not run a second time
    again = await pool.run("print('next run')")  # later runs go to B at once
    assert again.stdout == "next run\n" and b.hello()["started"] == 1


async def test_bot_code_turn_through_the_pool(
    tmp_path: Path,
    tg: FakeTelegram,
    llm: FakeLLM,
    services: Callable[..., TcpService],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    a = services()
    dead = f"tcp://127.0.0.1:{free_port()}"
    llm.script(tool_calls(call("code", {"action": "execute", "code": "print(6 * 7)"})), text("It is 42."))
    urls = f"{dead},{a.url}"
    async with running_bot(tmp_path, tg, llm, code_sandbox_urls=urls, code_sandbox_token=TOKEN) as h:
        tg.push_text(OWNER, "six times seven?")
        await h.final_text(OWNER, "It is 42.")
        result = json.loads(llm.requests[1]["messages"][-1]["content"])
        assert result["stdout"] == "42\n" and result["isolation"] == "bwrap"
    assert a.hello()["started"] == 1
    assert "code sandbox pool, 1 of 2 services up" in caplog.text and TOKEN not in caplog.text


async def test_pool_never_waits_for_a_hanging_service_on_the_event_loop(
    services: Callable[..., TcpService], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A single client asks a silent service again after _INFO_RETRY_S; the pool must not ask at all.
    monkeypatch.setattr(client_module, "_INFO_RETRY_S", 0.0)
    a = services()
    hanging = socket.socket()  # accepts connections and never answers
    hanging.bind(("127.0.0.1", 0))
    hanging.listen(16)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = hanging.accept()
            except OSError:
                return
            accepted.append(conn)

    threading.Thread(target=accept, daemon=True).start()
    try:
        quiet = ServiceExecutor(
            f"tcp://127.0.0.1:{hanging.getsockname()[1]}", connect_timeout_s=0.5, token=TOKEN
        )
        pool = SandboxPool([quiet, ServiceExecutor(a.url, token=TOKEN)])
        asked = len(accepted)  # the probes at start
        for _ in range(20):  # what the code tool reads on the event loop
            assert pool.isolation is Isolation.BWRAP and "python" in pool.languages()
        assert len(accepted) == asked  # not one connection to the hanging service
        assert (await pool.run("print('fine')")).stdout == "fine\n"
    finally:
        hanging.close()
        for conn in accepted:
            conn.close()


async def test_files_and_a_stop_go_through_the_pool(services: Callable[..., TcpService]) -> None:
    a = services()
    pool = SandboxPool([ServiceExecutor(a.url, token=TOKEN)])
    code = (
        "rows = open('in/data.csv').read().split()\n"
        "open('out/n.txt', 'w').write(str(len(rows)))\n"
        "print(rows[0])"
    )
    result = await pool.run(code, files_in={"data.csv": b"x,y\n1,4\n"}, files_out=FileLimits(2, 1000))
    assert result.success, result.stderr
    assert result.stdout == "x,y\n"
    assert [(f.name, f.data) for f in result.files_out] == [("n.txt", b"2")]

    # A stopped turn cancels its run: the pool's connection closes after "started", and the service kills
    # the run (it would sleep 319 s) instead of finishing it.
    marker = "319.5"
    run = asyncio.create_task(
        pool.run(f"import subprocess\nsubprocess.run(['sleep', '{marker}'])\n", "python", 20)
    )
    while not processes_with(marker):
        await asyncio.sleep(0.05)
    run.cancel()
    with pytest.raises(asyncio.CancelledError):
        await run
    for _ in range(100):
        if not processes_with(marker) and (await a.state())["running"] == 0:
            break
        await asyncio.sleep(0.05)
    assert processes_with(marker) == []
    assert (await a.state())["running"] == 0
