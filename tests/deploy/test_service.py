"""The sandbox service as a real process on a real unix socket, driven by the bot's real code tool."""

from __future__ import annotations

import array
import asyncio
import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import termios
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from core_tools.code.tool import CodeTool
from core_tools.errors import ToolError
from core_tools.registry import ToolRegistry
from core_tools.sandbox import Isolation, detect_isolation
from core_tools.sandbox.cgroup import RunParent, find_run_parent
from core_tools.sandbox.client import ServiceExecutor
from core_tools.sandbox.model import FileLimits
from core_tools.sandbox.protocol import MAX_REQUEST_BYTES
from core_tools.types import ToolCallRequest, ToolContext
from db.engine import make_engine, make_sessionmaker
from db.executions import Executions
from db.migrate import upgrade

REPO = Path(__file__).resolve().parents[2]
CTX = ToolContext(user_id=7, chat_id=7, session_id="s1", trigger_message="compute")
ISOLATION, REASON = detect_isolation()
pytestmark = [
    pytest.mark.slow,  # sandbox service processes
    pytest.mark.skipif(ISOLATION is not Isolation.BWRAP, reason=f"no working bwrap: {REASON}"),
]


class Service:
    """One `python -m core_tools.sandbox.service` process."""

    def __init__(self, sock: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.sock = sock
        self.args = args
        self.env = env
        self.proc: subprocess.Popen[str] | None = None

    def start(self) -> Service:
        """Start it and wait until it answers a hello."""
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "core_tools.sandbox.service", "--socket", str(self.sock), *self.args],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self.env,
        )
        deadline = time.monotonic() + 120  # a cold start on a loaded machine
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"service exited: {self.proc.stdout.read() if self.proc.stdout else ''}")
            try:
                hello(self.sock)
                return self
            except OSError:
                time.sleep(0.1)
        raise AssertionError("service did not come up")

    def stop(self) -> str:
        """SIGTERM, wait, return its log."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=30)
        return out


def exchange(sock: Path, payload: bytes, timeout: float = 30.0) -> dict[str, object]:
    """Send raw bytes, read the one answer line."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(str(sock))
        # The service may answer and close before reading an oversize request.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            s.sendall(payload)
        data = b""
        while not data.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    answer: dict[str, object] = json.loads(data)
    return answer


def hello(sock: Path) -> dict[str, object]:
    """The service's hello."""
    return exchange(sock, b'{"op": "hello"}\n', timeout=2)


@pytest.fixture
def executions(tmp_path: Path) -> Executions:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    upgrade(url)
    return Executions(make_sessionmaker(make_engine(url)))


@pytest.fixture
def sock(tmp_path: Path) -> Path:
    return tmp_path / "run" / "sandbox.sock"


@pytest.fixture
def start(sock: Path) -> Iterator[Callable[..., Service]]:
    started: list[Service] = []

    def _start(*args: str, env: dict[str, str] | None = None) -> Service:
        service = Service(sock, "--timeout", "5", "--max-timeout", "10", *args, env=env).start()
        started.append(service)
        return service

    yield _start
    for service in started:
        service.stop()


async def test_code_tool_runs_through_the_service(
    start: Callable[..., Service], sock: Path, executions: Executions
) -> None:
    service = start()
    executor = ServiceExecutor(str(sock))
    assert executor.isolation is Isolation.BWRAP and "python" in executor.languages()
    assert "bwrap" in executor.describe() and str(sock) in executor.describe()
    tool = CodeTool(executor, executions)
    out = await tool.code(CTX, "execute", code="import os; print(6 * 7, os.getuid())")
    assert out["success"] is True and out["stdout"] == "42 65534\n" and out["isolation"] == "bwrap"
    failed = await tool.code(CTX, "execute", code="raise ValueError('boom')")
    assert failed["success"] is False and failed["error_category"] == "runtime" and "boom" in failed["stderr"]
    assert executions.count(7) == 2
    with pytest.raises(ToolError, match="not available; available: python"):
        await tool.code(CTX, "execute", code="puts 1", language="ruby")
    with pytest.raises(ToolError, match="timeout must be positive"):
        await executor.run("print(1)", "python", -1)
    # The socket is group-accessible (the bot runs as the same uid or group), not world-writable.
    assert oct(sock.stat().st_mode & 0o777) == "0o660"
    log = service.stop()
    assert "code sandbox: bwrap" in log and f"serving on {sock}" in log
    assert not sock.exists(), "SIGTERM removes the socket"
    assert service.proc is not None and service.proc.returncode == 0


async def test_oversize_and_malformed_requests_are_refused(start: Callable[..., Service], sock: Path) -> None:
    start()
    big = json.dumps({"op": "run", "code": "#" * (MAX_REQUEST_BYTES + 10)}).encode() + b"\n"
    answer = exchange(sock, big)
    assert answer["ok"] is False and answer["kind"] == "too_large"
    assert exchange(sock, b"not json\n")["kind"] == "bad_request"
    assert exchange(sock, b'{"op": "format-disk"}\n')["kind"] == "bad_request"
    assert exchange(sock, b'{"op": "run", "code": 5}\n')["kind"] == "bad_request"
    executor = ServiceExecutor(str(sock))
    with pytest.raises(ToolError, match="too large for the code sandbox"):
        await executor.run("x = 1\n" * 200_000)
    # A program just under the limit runs, and the service is still healthy after all of the above.
    result = await executor.run("x = 1\n" * 100_000 + "print('big ok')")
    assert result.success and result.stdout == "big ok\n"


async def test_concurrent_runs_are_bounded(start: Callable[..., Service], sock: Path) -> None:
    start("--max-concurrent", "2", "--queue-timeout", "60")
    executor = ServiceExecutor(str(sock))
    # Each run lasts long enough for the state to be seen while two of them run and two wait, however
    # long a loaded machine takes to get the four requests to the service.
    program = "import time; a = time.time(); time.sleep(4.0); print(a, time.time())"
    runs = [asyncio.create_task(executor.run(program, timeout_s=10)) for _ in range(4)]
    state = await asyncio.to_thread(hello, sock)
    deadline = time.monotonic() + 60
    while (state["running"], state["waiting"]) != (2, 2) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        state = await asyncio.to_thread(hello, sock)
    assert state["running"] == 2 and state["waiting"] == 2
    results = await asyncio.gather(*runs)
    assert all(r.success for r in results)
    spans = [tuple(map(float, r.stdout.split())) for r in results]
    overlap = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert overlap == 2, spans


async def test_busy_when_no_slot_frees_in_time(start: Callable[..., Service], sock: Path) -> None:
    start("--max-concurrent", "1", "--queue-timeout", "0.5")
    executor = ServiceExecutor(str(sock))
    first = asyncio.create_task(executor.run("import time; time.sleep(5); print('first')", timeout_s=10))
    deadline = time.monotonic() + 60
    while (await asyncio.to_thread(hello, sock))["running"] != 1 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)  # the first run holds the only slot before the second asks
    with pytest.raises(ToolError, match="busy"):
        await executor.run("print('second')")
    assert (await first).stdout == "first\n"
    assert (await executor.run("print('third')")).stdout == "third\n"


def _descendants(pid: int) -> list[int]:
    """Every process below `pid`, from /proc."""
    found: list[int] = []
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except OSError:
            continue
        found += [int(c) for c in children]
        todo += [int(c) for c in children]
    return found


def _alive(pid: int) -> bool:
    """Running, not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cmdline(pid: int) -> bytes:
    """A process's argv, NUL-separated (empty once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def _in_run_cgroups(service_pid: int) -> list[int]:
    """Live processes in a run cgroup of that service: finds a run's processes even once orphaned."""
    marker = f"/sandbox-run-{service_pid}-"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if marker in (entry / "cgroup").read_text() and _alive(int(entry.name)):
                    found.append(int(entry.name))
    return found


_PROGRAM = b"-I\0-u\0-\0"  # how the sandboxed interpreter is started: the program runs


def _is_interpreter(pid: int) -> bool:
    """The sandboxed interpreter itself (running its program, or waiting for it on stdin)."""
    argv = _cmdline(pid)
    return argv.split(b"\0")[0].rsplit(b"/", 1)[-1].startswith(b"python") and argv.endswith(_PROGRAM)


def _is_bwrap(pid: int) -> bool:
    """Whether that process runs bwrap."""
    return _cmdline(pid).split(b"\0")[0].endswith(b"/bwrap")


def _setting_up(pid: int) -> bool:
    """The sandbox half of bwrap (a bwrap child of bwrap) still setting up: it keeps /proc open until
    then, and only then arms its own --die-with-parent."""
    with contextlib.suppress(OSError, IndexError, ValueError):
        parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        if _is_bwrap(pid) and _is_bwrap(parent):
            return any(os.readlink(fd) == "/proc" for fd in Path(f"/proc/{pid}/fd").iterdir())
    return False


def _stdin_waiting(pid: int) -> int:
    """How many bytes wait in a process's stdin pipe."""
    stdin = os.open(f"/proc/{pid}/fd/0", os.O_RDONLY | os.O_NONBLOCK)
    try:
        waiting = array.array("i", [0])
        fcntl.ioctl(stdin, termios.FIONREAD, waiting)
        return waiting[0]
    finally:
        os.close(stdin)


def _watch_tree(proc: subprocess.Popen[str], seen: set[int], found: Callable[[int], bool]) -> int:
    """Poll the service's process tree (adding to `seen`) until a process matches; that process."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        tree = _descendants(proc.pid)
        seen.update(tree)
        match = next((p for p in tree if found(p)), None)
        if match is not None:
            return match
    raise AssertionError(f"not seen in the run: {[_cmdline(p) for p in seen]}")


class _Missed(Exception):
    """The moment passed before the test could catch it: try again with another run."""


def _kill_while_bwrap_sets_up(proc: subprocess.Popen[str]) -> set[int]:
    """SIGKILL the service while the sandbox half of bwrap sets up, the program waiting in its stdin.

    That half is held still meanwhile (SIGSTOP, as a slow machine would): the moment is otherwise a few
    milliseconds, and a kill before the service wrote the code just ends the run on an empty stdin.
    """
    seen: set[int] = set()
    outer = _watch_tree(proc, seen, _is_bwrap)
    children = Path(f"/proc/{outer}/task/{outer}/children")
    deadline = time.monotonic() + 10
    inner = None
    while inner is None and time.monotonic() < deadline:
        with contextlib.suppress(OSError, ValueError, IndexError):
            inner = int(children.read_text().split()[0])
    assert inner is not None, "bwrap started no sandbox"
    os.kill(inner, signal.SIGSTOP)
    seen.add(inner)
    try:
        if not _setting_up(inner):
            raise _Missed("it finished setting up before it stopped (a busy machine)")
        while _stdin_waiting(inner) == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert _stdin_waiting(inner) > 0, "the service wrote no code"
        proc.kill()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(inner, signal.SIGCONT)
    return seen


_LONG = "600.4242"  # how long the program's `sleep` lasts: ten minutes, and a mark to find it by


def _kill_while_the_program_runs(proc: subprocess.Popen[str]) -> set[int]:
    """SIGKILL the service once the program runs (its `sleep` child is there)."""
    seen: set[int] = set()
    _watch_tree(proc, seen, lambda p: _LONG.encode() in _cmdline(p))
    proc.kill()
    return seen


# Each moment, and the service's options for it: "while bwrap sets up" is the sandbox of the run itself
# (none is started ahead), "while the program runs" the sandbox the run took, started ahead of it.
MOMENTS: dict[str, tuple[Callable[[subprocess.Popen[str]], set[int]], tuple[str, ...]]] = {
    "while bwrap sets up": (_kill_while_bwrap_sets_up, ("--ahead", "0")),
    "while the program runs": (_kill_while_the_program_runs, ("--ahead", "1")),
}


def _wait_until_gone(seen: set[int], service_pid: int) -> None:
    """Every process seen, and any in a run cgroup of that service, goes (the deadline is only a guard)."""
    deadline = time.monotonic() + 60
    while (any(_alive(p) for p in seen) or _in_run_cgroups(service_pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = [p for p in seen if _alive(p)] + _in_run_cgroups(service_pid)
    assert not left, [(p, _cmdline(p)) for p in left]


# Runs tried before giving up on catching the moment (the moment is a few milliseconds, see
# _kill_while_bwrap_sets_up; twenty misses in a row happened in 1 of 6 runs on a loaded machine).
ATTEMPTS = 20


@pytest.mark.parametrize("moment", list(MOMENTS))
async def test_service_killed_mid_run_gives_a_clear_error_and_recovers(
    start: Callable[..., Service], sock: Path, executions: Executions, moment: str
) -> None:
    """A SIGKILLed service takes every process of its runs with it, and a restarted one serves at once.

    Killed while bwrap was still setting its sandbox up, the run used to survive the service: orphaned, it
    ran its program to the end (7 such kills in 8 before the guardian).
    """
    kill, options = MOMENTS[moment]
    service = start(*options)
    assert service.proc is not None
    registry = ToolRegistry()
    registry.register(CodeTool(ServiceExecutor(str(sock)), executions).code, timeout_s=60)

    def call(code: str, call_id: str) -> ToolCallRequest:
        return ToolCallRequest(call_id, "code", json.dumps({"action": "execute", "code": code}))

    assert (await registry.call(call("print(1)", "c0"), CTX)).ok  # with --ahead 1, starts the next sandbox
    for attempt in range(ATTEMPTS):
        # Ten minutes: far past the tool's 60 s timeout, so an answer at all shows it came when the service
        # died, and a later run that works was not waiting for this program.
        program = call(f"import subprocess; subprocess.run(['sleep', '{_LONG}'])", f"c1-{attempt}")
        pending = asyncio.create_task(registry.call(program, CTX))
        try:
            seen = await asyncio.to_thread(kill, service.proc)
            break
        except _Missed:
            pending.cancel()  # the service kills that run when its client leaves
            await asyncio.gather(pending, return_exceptions=True)
    else:
        # Not a failure of the service: this machine was too busy to catch a moment of a few milliseconds
        # (1 loaded run in 6 missed it twenty times). The other moment still checks the kill; this one runs
        # again on the next run of the suite.
        pytest.skip(f"the moment was missed {ATTEMPTS} times: the machine is too busy to catch it")
    outcome = await pending
    assert not outcome.ok and outcome.error is not None
    assert "closed the connection without answering" in outcome.error and str(sock) in outcome.error
    await asyncio.to_thread(_wait_until_gone, seen, service.proc.pid)
    log = service.stop()
    if "memory bound: cgroup" in log:
        assert f"sandbox guardian: the sandbox service (pid {service.proc.pid}) is gone" in log, log

    down = await registry.call(call("print(1)", "c2"), CTX)
    assert not down.ok and down.error is not None
    assert f"not reachable at {sock}" in down.error and "connection refused" in down.error

    start()  # the same socket path: the stale socket file left by kill -9 is replaced
    again = await registry.call(call("print('back')", "c3"), CTX)
    assert again.ok, again.error
    assert json.loads(again.content)["stdout"] == "back\n"


async def test_service_killed_with_sandboxes_waiting_leaves_nothing(
    start: Callable[..., Service], sock: Path
) -> None:
    """The sandboxes a service started ahead of their runs go with it, and so do their cgroups."""
    service = start("--ahead", "1")
    assert service.proc is not None
    executor = ServiceExecutor(str(sock))
    assert (await executor.run("print(1)")).success  # each kind of run used gets a sandbox started ahead
    assert (await executor.run("print(2)", files_out=FileLimits())).success
    seen: set[int] = set()
    deadline = time.monotonic() + 20
    while sum(_is_interpreter(p) for p in seen if _alive(p)) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        seen.update(_descendants(service.proc.pid))
    waiting = [p for p in seen if _is_interpreter(p) and _alive(p)]
    assert len(waiting) == 2, [_cmdline(p) for p in seen]
    service.proc.kill()
    await asyncio.to_thread(_wait_until_gone, seen, service.proc.pid)
    log = service.stop()
    if "memory bound: cgroup" in log:
        assert "emptied 2 run cgroups" in log, log


async def test_no_process_of_a_run_holds_the_services_sockets(
    start: Callable[..., Service], sock: Path
) -> None:
    """Neither the sandbox nor the guardian keeps the listening or an accepted socket (or a kill -9 of the
    service would leave clients connecting to a socket nobody answers)."""
    service = start("--ahead", "1")
    assert service.proc is not None
    executor = ServiceExecutor(str(sock))
    program = "import time; open('out/a.txt', 'w').write('x'); time.sleep(3)"
    assert (await executor.run("print(1)", files_out=FileLimits())).success  # a sandbox is started ahead
    run = asyncio.create_task(executor.run(program, files_out=FileLimits()))  # files_out: a passed fd too
    tree: list[int] = []
    deadline = time.monotonic() + 20
    # The program's interpreter and the one started ahead for the next run.
    while sum(_is_interpreter(p) for p in tree) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
        tree = _descendants(service.proc.pid)

    def sockets(pid: int) -> set[str]:
        fds = Path(f"/proc/{pid}/fd")
        links = set()
        for fd in fds.iterdir() if fds.exists() else ():
            with contextlib.suppress(OSError):
                links.add(os.readlink(fd))
        return {link for link in links if link.startswith("socket:")}

    own = sockets(service.proc.pid)
    assert own, "the service's listening and accepted sockets"
    assert any(b"core_tools.sandbox.guardian" in _cmdline(p) for p in tree), "the guardian"
    assert sum(_is_interpreter(p) for p in tree) == 2, "the program runs, the next sandbox waits"
    held = {p: sockets(p) & own for p in tree}
    assert not any(held.values()), held
    result = await run
    assert result.success and [f.name for f in result.files_out] == ["a.txt"]


def test_a_restarted_service_kills_what_runs_in_stale_run_cgroups(
    start: Callable[..., Service], tmp_path: Path
) -> None:
    """Belt and braces: processes left in the run cgroup of a dead service die before a new one serves."""
    # cgroup v1 only: on v2 this process would share its cgroup with the service, which then makes none
    # (and looking for a parent there would move this process into a leaf cgroup).
    if not re.search(r"^\d+:[^:]*\bmemory\b", Path("/proc/self/cgroup").read_text(), re.M):
        pytest.skip("no cgroup v1 memory hierarchy here")
    parent = find_run_parent()
    if not isinstance(parent, RunParent) or parent.version != 1:
        pytest.skip(f"no run cgroups here: {parent}")
    dead = subprocess.Popen(["true"])  # a pid that no longer runs, like a crashed service's
    dead.wait()
    stale = parent.path / f"sandbox-run-{dead.pid}-0-deadbeef"
    stale.mkdir()
    leftover = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        (stale / "cgroup.procs").write_text(str(leftover.pid))
        start()
        assert leftover.wait(timeout=5) == -signal.SIGKILL
        assert not stale.exists()
    finally:
        if leftover.poll() is None:
            leftover.kill()
            leftover.wait()
        with contextlib.suppress(OSError):
            stale.rmdir()


async def test_unreachable_service_is_a_clear_error(tmp_path: Path) -> None:
    executor = ServiceExecutor(str(tmp_path / "nothing.sock"))
    assert executor.isolation is Isolation.UNAVAILABLE and executor.languages() == []
    assert "not reachable yet" in executor.describe()
    with pytest.raises(ToolError, match=r"not reachable at .*nothing\.sock: no socket there"):
        await executor.run("print(1)")


def test_a_second_service_or_a_foreign_file_is_not_clobbered(
    start: Callable[..., Service], sock: Path, tmp_path: Path
) -> None:
    start()
    second = subprocess.run(
        [sys.executable, "-m", "core_tools.sandbox.service", "--socket", str(sock)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert second.returncode == 1 and "already listening" in second.stderr
    assert hello(sock)["ok"] is True
    foreign = tmp_path / "notes.txt"
    foreign.write_text("keep me")
    third = subprocess.run(
        [sys.executable, "-m", "core_tools.sandbox.service", "--socket", str(foreign)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert third.returncode == 1 and "not a socket" in third.stderr and foreign.read_text() == "keep me"


def ping(path: Path) -> subprocess.CompletedProcess[str]:
    """The container's health check command, run against `path`."""
    return subprocess.run(
        [sys.executable, "-m", "core_tools.sandbox.service", "--ping", "--socket", str(path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_ping_is_the_health_check(start: Callable[..., Service], sock: Path, tmp_path: Path) -> None:
    start()
    up = ping(sock)
    assert up.returncode == 0 and "code sandbox: bwrap" in up.stdout
    down = ping(tmp_path / "none.sock")
    assert down.returncode == 1 and "not answering" in down.stderr
    assert os.path.exists(sock)


@pytest.fixture
def failing_bwrap() -> Iterator[dict[str, str]]:
    """An environment whose first `bwrap` fails as it does under a seccomp profile that forbids sethostname.

    Outside pytest's private tmp_path: as root the service runs bwrap as the sandbox's unprivileged uid.
    """
    bin_dir = Path(tempfile.mkdtemp(prefix="fake-bwrap-"))
    bin_dir.chmod(0o755)
    fake = bin_dir / "bwrap"
    message = "bwrap: Can't set hostname to sandbox: Operation not permitted"
    fake.write_text(f'#!/bin/sh\necho "{message}" >&2\nexit 1\n')
    fake.chmod(0o755)
    yield {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    shutil.rmtree(bin_dir)


async def test_ping_fails_when_the_service_cannot_isolate(
    start: Callable[..., Service], sock: Path, failing_bwrap: dict[str, str]
) -> None:
    """A service that answers but refuses every run is unhealthy, and the one line says why."""
    start(env=failing_bwrap)
    said = hello(sock)
    assert said["isolation"] == "unavailable" and "Can't set hostname" in str(said["isolation_reason"])
    down = ping(sock)
    assert down.returncode == 1 and down.stdout == ""
    lines = down.stderr.splitlines()
    assert len(lines) == 1 and "cannot isolate code" in lines[0]
    assert " ".join(str(said["isolation_reason"]).split()) in lines[0], "the probe's own words name the cause"
    # Every run is refused, and the model is told the cause and the container settings that fix it.
    refused = await ServiceExecutor(str(sock)).run("print(1)")
    assert refused.error_category == "refused" and not refused.success and refused.stdout == ""
    assert "deploy/seccomp-bwrap.json" in refused.stderr


def test_ping_passes_when_the_operator_allowed_unsandboxed_runs(
    start: Callable[..., Service], sock: Path, failing_bwrap: dict[str, str]
) -> None:
    start("--allow-unsandboxed", env=failing_bwrap)
    assert hello(sock)["isolation"] == "unsandboxed"
    up = ping(sock)
    assert up.returncode == 0 and "unsandboxed" in up.stdout.lower(), up


def test_deeply_nested_request_gets_an_error_line(start: Callable[..., Service], sock: Path) -> None:
    """The stdlib JSON parser recurses per level: 100,000 `[` must still get the protocol's error line."""
    start()
    deep = b"[" * 100_000
    for payload in (deep + b"\n", b'{"op": "run", "code": ' + deep + b"]" * 100_000 + b"}\n"):
        answer = exchange(sock, payload)
        assert answer["ok"] is False and answer["kind"] == "bad_request", answer
        assert "nested too deeply" in str(answer["error"])
    assert hello(sock)["ok"] is True, "and the service keeps serving"
