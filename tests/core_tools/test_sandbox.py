"""The code sandbox against real interpreters, real bwrap and hostile code (no mocks)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from core_tools.errors import ToolError
from core_tools.sandbox import (
    ExecutionResult,
    Isolation,
    LocalExecutor,
    SandboxLimits,
    categorize_error,
    describe,
    detect_isolation,
    launch,
)
from core_tools.sandbox.cgroup import runs_of
from core_tools.sandbox.model import FileLimits

REPO = Path(__file__).resolve().parents[2]
ISOLATION, REASON = detect_isolation()
needs_bwrap = pytest.mark.skipif(ISOLATION is not Isolation.BWRAP, reason=f"no working bwrap: {REASON}")
needs_node = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
LIMITS = SandboxLimits(timeout_s=5.0, max_timeout_s=10.0)


@pytest.fixture(params=[0, 1], ids=["started-for-the-run", "started-ahead"])
async def executor(request: pytest.FixtureRequest) -> AsyncIterator[LocalExecutor]:
    """A LocalExecutor whose runs start their own sandbox, or take one started before them (Python without
    files: the others start theirs when they come)."""
    if ISOLATION is not Isolation.BWRAP:
        pytest.skip(f"no working bwrap: {REASON}")
    executor = LocalExecutor(LIMITS, ahead=request.param)
    if request.param:
        assert await executor.prepare() and executor.started_ahead() == 1
    yield executor
    await executor.aclose()


def _processes_with(token: str) -> list[str]:
    """Command lines of live processes on the host that mention `token` (zombies have none)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if token in cmdline:
            found.append(f"{entry}: {cmdline}")
    return found


def _alive(pid: int) -> bool:
    """Running, not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _token() -> str:
    """A unique float-looking argument for `sleep`, easy to find in the host's process list."""
    return f"1000.{uuid.uuid4().int % 10**12:012d}"


# --- happy path -------------------------------------------------------------------------------------


async def test_python_prints_and_succeeds(executor: LocalExecutor) -> None:
    result = await executor.run("print('hello', 6 * 7)")
    assert result.success and result.exit_code == 0
    assert result.stdout == "hello 42\n" and result.stderr == ""
    assert result.error_category is None and not result.truncated and not result.timed_out
    assert result.isolation == "bwrap" and result.language == "python"
    assert json.loads(json.dumps(dataclasses.asdict(result)))["stdout"] == "hello 42\n"


async def test_exit_code_and_stdin_is_the_program(executor: LocalExecutor) -> None:
    result = await executor.run("import sys\nprint(repr(sys.stdin.read()))\nsys.exit(3)")
    assert not result.success and result.exit_code == 3
    assert result.stdout == "''\n"  # the program consumed stdin; code cannot read more of it
    assert result.error_category == "runtime"


async def test_scratch_is_cwd_and_home_and_writable(executor: LocalExecutor) -> None:
    code = (
        "import os\nopen('f.txt','w').write('x')\n"
        "print(os.getcwd(), os.environ['HOME'], os.listdir('.'), os.getuid())"
    )
    result = await executor.run(code)
    assert result.success, result.stderr
    assert result.stdout.split() == ["/scratch", "/scratch", "['f.txt']", "65534"]


@needs_node
async def test_javascript_runs_commonjs_and_modules(executor: LocalExecutor) -> None:
    assert executor.languages() == ["python", "javascript"]
    cjs = await executor.run("const os = require('os'); console.log(40 + 2, os.hostname())", "javascript")
    assert cjs.success and cjs.stdout == "42 sandbox\n", cjs.stderr
    esm = await executor.run("import fs from 'fs';\nconsole.log(fs.readdirSync('.').length)", "js")
    assert esm.success and esm.stdout == "0\n" and esm.language == "javascript", esm.stderr


async def test_unknown_language_names_available(executor: LocalExecutor) -> None:
    with pytest.raises(ToolError, match="available: python"):
        await executor.run("puts 1", "ruby")


# --- error categories from real output ----------------------------------------------------------------


@needs_bwrap
@pytest.mark.parametrize(
    ("code", "category"),
    [
        ("print('a'", "syntax"),
        ("if True:\nprint(1)", "syntax"),
        ("import no_such_module_xyz", "import"),
        ("from os import no_such_name", "import"),
        ("1 + 'a'", "type"),
        ("print(undefined_name)", "reference"),
        ("int('x')", "runtime"),
        ("x = bytearray(4 * 1024**3)", "memory"),
        ("import socket\nsocket.getaddrinfo('example.com', 80)", "network"),
        ("import urllib.request\nurllib.request.urlopen('http://example.com', timeout=2)", "network"),
        ("while True: pass", "timeout"),
    ],
)
async def test_python_error_categories(code: str, category: str) -> None:
    result = await LocalExecutor(LIMITS).run(code, timeout_s=1.5)
    assert not result.success
    assert result.error_category == category, result.stderr


@needs_bwrap
@needs_node
@pytest.mark.parametrize(
    ("code", "category"),
    [
        ("console.log(", "syntax"),
        ("undefinedThing + 1", "reference"),
        ("null.x", "type"),
        ("require('no-such-module-xyz')", "import"),
        ("import x from 'no-such-package-xyz';", "import"),
        ("await fetch('http://example.com')", "network"),
        ("require('http').get('http://127.0.0.1:9')", "network"),
        ("throw new RangeError('bad')", "runtime"),
        ("const a = []; while (true) a.push(new Array(1e6).fill(1.5));", "memory"),
        ("Buffer.alloc(4 * 1024 ** 3)", "memory"),
        ("while (true) {}", "timeout"),
    ],
)
async def test_javascript_error_categories(code: str, category: str) -> None:
    limits = dataclasses.replace(LIMITS, memory_mb=128)
    # Filling 128 MB takes well under a second alone but several on a loaded 2-core machine, where a 3 s
    # budget made the memory case a timeout; only the timeout case needs the short one.
    result = await LocalExecutor(limits).run(code, "javascript", timeout_s=3 if category == "timeout" else 20)
    assert not result.success
    assert result.error_category == category, result.stderr[:2000]


def test_categorize_plain_text() -> None:
    tb = 'Traceback (most recent call last):\n  File "<stdin>", line 1\nsocket.gaierror: [Errno -2] Name'
    assert categorize_error("python", tb, 1, False) == "network"
    assert categorize_error("python", "OSError: [Errno 101] Network is unreachable", 1, False) == "network"
    assert categorize_error("python", "", 0, False) is None
    assert categorize_error("python", "", None, True) == "timeout"
    assert categorize_error("python", "", 128 + 24, False) == "timeout"  # SIGXCPU: RLIMIT_CPU
    assert categorize_error("python", "", -9, False) == "unknown"
    assert categorize_error("javascript", "x", None, False, refused=True) == "refused"


# --- the wall clock kills everything ------------------------------------------------------------------


async def test_timeout_kills_process_tree_and_daemon(executor: LocalExecutor) -> None:
    token = _token()
    code = f"""
import os, subprocess, time
subprocess.Popen(['sleep', '{token}'])              # a plain child
if os.fork() == 0:                                  # a daemon: double fork + setsid
    os.setsid()
    if os.fork() == 0:
        os.execv('/bin/sleep', ['sleep', '{token}'])
    os._exit(0)
print('started', flush=True)
time.sleep(1000)
"""
    result = await executor.run(code, timeout_s=1.5)
    assert result.timed_out and result.error_category == "timeout" and result.exit_code is None
    assert result.stdout == "started\n"
    assert "timeout" in result.stderr
    assert _processes_with(token) == []


async def test_daemon_does_not_outlive_a_successful_run(executor: LocalExecutor) -> None:
    token = _token()
    code = f"""
import os
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv('/bin/sleep', ['sleep', '{token}'])
    os._exit(0)
os.wait()
print('parent done')
"""
    result = await executor.run(code, timeout_s=3)
    assert result.success and result.stdout == "parent done\n"
    assert _processes_with(token) == []


@needs_bwrap
async def test_timeout_is_clamped_to_max() -> None:
    limits = dataclasses.replace(LIMITS, max_timeout_s=1.0)
    result = await LocalExecutor(limits).run("import time\ntime.sleep(60)", timeout_s=100)
    assert result.timed_out and result.duration_ms < 30_000
    with pytest.raises(ToolError):
        await LocalExecutor(limits).run("print(1)", timeout_s=0)


# --- output cap -------------------------------------------------------------------------------------


async def test_output_is_capped_while_reading(executor: LocalExecutor) -> None:
    size = 50 * 1024 * 1024
    code = f"import sys\nsys.stdout.write('x' * {size})\nsys.stderr.write('e' * 100_000)"
    result = await executor.run(code)
    assert result.success and result.truncated
    assert result.stdout_bytes == size and result.stderr_bytes == 100_000
    assert len(result.stdout) <= LIMITS.output_cap_bytes and len(result.stderr) <= LIMITS.output_cap_bytes


async def test_invalid_utf8_is_replaced(executor: LocalExecutor) -> None:
    result = await executor.run("import sys\nsys.stdout.buffer.write(b'ok\\xff\\xfe')")
    assert result.success and result.stdout == "ok\ufffd\ufffd"


# --- nothing of the bot is visible ------------------------------------------------------------------


async def test_secret_environment_is_not_passed(
    executor: LocalExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "secret-telegram-token")
    monkeypatch.setenv("OPENAI_API_KEY", "secret-openai-key")
    code = "import os\nprint(sorted(os.environ.items()))\nprint(open('/proc/1/environ','rb').read())"
    result = await executor.run(code)
    assert result.success, result.stderr
    assert "secret" not in result.stdout and "TELEGRAM" not in result.stdout and "OPENAI" not in result.stdout


@needs_bwrap
async def test_bot_dir_database_and_dotenv_invisible_and_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bot = tmp_path / "bot"
    (bot / "data").mkdir(parents=True)
    dotenv, database = bot / ".env", bot / "data" / "assistant.db"
    dotenv.write_text("TELEGRAM_BOT_TOKEN=secret\n")
    database.write_bytes(b"SQLite format 3\0" + b"\1" * 100)
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (dotenv, database)}
    monkeypatch.chdir(bot)
    code = f"""
import os
for path in [{str(dotenv)!r}, {str(database)!r}, {str(bot)!r}]:
    print(path, os.path.exists(path))
for path in [{str(dotenv)!r}, {str(database)!r}]:
    try:
        open(path, 'w').write('pwned')
        print('WROTE', path)
    except OSError as exc:
        print('denied', type(exc).__name__)
print(os.getcwd(), os.listdir('.'))
"""
    result = await LocalExecutor(LIMITS).run(code)
    assert result.success, result.stderr
    assert "True" not in result.stdout and "WROTE" not in result.stdout
    assert result.stdout.count("denied") == 2
    assert "/scratch []" in result.stdout
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in (dotenv, database)} == before


async def test_repo_home_and_host_proc_invisible(executor: LocalExecutor) -> None:
    code = f"""
import os
print([p for p in [{str(REPO)!r}, '/work', '/root', '/home', '/data', '/sys', '/run'] if os.path.exists(p)])
pids = [p for p in os.listdir('/proc') if p.isdigit()]
print(len(pids), open('/proc/1/cmdline','rb').read().split(b'\\0')[0])
"""
    result = await executor.run(code)
    assert result.success, result.stderr
    visible, proc_line = result.stdout.splitlines()
    assert visible == "[]"
    count, init = proc_line.split(" ", 1)
    assert int(count) <= 3 and "bwrap" in init  # only the sandbox's own processes


async def test_writes_outside_scratch_fail(executor: LocalExecutor) -> None:
    name = f"sandbox-escape-{uuid.uuid4().hex}"
    code = f"""
for path in ['/usr/{name}', '/etc/{name}', '/{name}', '/proc/{name}']:
    try:
        open(path, 'w').write('x')
        print('WROTE', path)
    except OSError as exc:
        print('denied', path, exc.errno)
open('/tmp/{name}', 'w').write('private tmp')  # the sandbox's own tmpfs, not the host's /tmp
print(open('/tmp/{name}').read())
"""
    result = await executor.run(code)
    assert result.success, result.stderr
    assert "WROTE" not in result.stdout and result.stdout.count("denied") == 4
    assert "private tmp" in result.stdout
    assert not (Path("/tmp") / name).exists() and not (Path("/usr") / name).exists()


async def test_loopback_server_unreachable(executor: LocalExecutor) -> None:
    connections: list[int] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(1)
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).send(b'hi')"
        result = await executor.run(code)
    finally:
        server.close()
        await server.wait_closed()
    assert not result.success and result.error_category == "network", result.stderr
    assert connections == []


# --- resource exhaustion ----------------------------------------------------------------------------


async def test_fork_bomb_is_contained(executor: LocalExecutor) -> None:
    token = _token()
    code = f"""
import os
n, error = 0, None
for _ in range(10_000):
    try:
        pid = os.fork()
    except OSError as exc:
        error = type(exc).__name__
        break
    if pid == 0:
        os.execv('/bin/sleep', ['sleep', '{token}'])
    n += 1
print(n, error)
"""
    result = await executor.run(code, timeout_s=3)
    assert result.success, result.stderr
    forked, error = result.stdout.split()
    assert int(forked) < LIMITS.max_processes and error == "BlockingIOError"
    assert _processes_with(token) == []
    # The host still answers promptly.
    host = subprocess.run(["/bin/true"], timeout=5, check=False)
    assert host.returncode == 0


async def test_file_size_and_scratch_size_are_capped(executor: LocalExecutor) -> None:
    result = await executor.run("open('big', 'wb').write(b'x' * (100 * 1024 * 1024))")
    assert not result.success and "File too large" in result.stderr


async def test_concurrent_runs_do_not_interfere(executor: LocalExecutor) -> None:
    code = "import os\nopen('mine-{i}', 'w').write('{i}')\nprint({i}, sorted(os.listdir('.')))"
    results = await asyncio.gather(*(executor.run(code.format(i=i)) for i in range(6)))
    for i, result in enumerate(results):
        assert result.success and result.stdout == f"{i} ['mine-{i}']\n", result.stderr


# --- sandboxes started ahead -------------------------------------------------------------------------


def _children() -> list[int]:
    """Live processes started by this test process (a sandbox waiting for its program, or a run's)."""
    found = []
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == os.getpid() and fields[0] != "Z":
                found.append(int(entry))
    return found


@needs_bwrap
async def test_a_sandbox_started_ahead_serves_one_run_only() -> None:
    executor = LocalExecutor(LIMITS, ahead=1)
    token = _token()
    try:
        assert await executor.prepare()
        first = f"""
import os
for path in ['/scratch/mine', '/tmp/mine', '/dev/shm/mine']:
    open(path, 'w').write('first run')
if os.fork() == 0:
    os.setsid()
    os.execv('/bin/sleep', ['sleep', '{token}'])
print('left things behind')
"""
        assert (await executor.run(first)).stdout == "left things behind\n"
        assert _processes_with(token) == []
        # The next run takes the sandbox started meanwhile: it sees nothing of the first one.
        assert await executor.prepare() and executor.started_ahead() == 1
        second = "import os\nprint([os.listdir(p) for p in ['/scratch', '/tmp', '/dev/shm']])"
        result = await executor.run(second)
        assert result.success and result.stdout == "[[], [], []]\n", result.stderr
    finally:
        await executor.aclose()


@needs_bwrap
async def test_files_go_in_and_come_out_of_sandboxes_started_ahead() -> None:
    executor = LocalExecutor(LIMITS, ahead=1)
    code = (
        "import os\nopen('out/seen.txt', 'w').write(' '.join(sorted(os.listdir('in'))))\n"
        "print(open('in/{0}').read())"
    )
    try:
        for name in ("a.txt", "b.txt"):  # the second run takes the sandbox the first one had started
            if name == "b.txt":
                assert await executor.prepare(files_in=True, files_out=True)
            result = await executor.run(
                code.format(name), files_in={name: name.encode()}, files_out=FileLimits(2, 1000)
            )
            assert result.success and result.stdout == f"{name}\n", result.stderr
            assert [(f.name, f.data) for f in result.files_out] == [("seen.txt", name.encode())]
    finally:
        await executor.aclose()


@needs_bwrap
async def test_closing_removes_the_sandboxes_started_ahead() -> None:
    executor = LocalExecutor(LIMITS, ahead=1)
    assert await executor.prepare()
    waiting = _children()
    assert waiting, "a sandbox waits for its program"
    parent = executor.run_parent
    await executor.aclose()
    assert executor.started_ahead() == 0 and not any(_alive(p) for p in waiting)
    if parent is not None:
        assert runs_of(parent.path, os.getpid()) == []
    # Runs still work, each starting its own sandbox, and leave none behind.
    assert (await executor.run("print(1)")).stdout == "1\n"
    assert _children() == []


@needs_bwrap
async def test_runs_work_without_setpriv(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without util-linux's setpriv the forked child drops privileges and asks to die with us itself."""
    monkeypatch.setattr(launch, "_SETPRIV", [None])
    assert launch.launcher()[1]["preexec_fn"] is not None
    executor = LocalExecutor(LIMITS, ahead=1)
    try:
        for _ in range(2):  # started for the run, then ahead of it
            result = await executor.run("import os; print(os.getuid())")
            assert result.success and result.stdout == "65534\n", result.stderr
            assert await executor.prepare()
    finally:
        await executor.aclose()


# --- no sandbox ---------------------------------------------------------------------------------------


async def test_refuses_when_bwrap_missing() -> None:
    executor = LocalExecutor(LIMITS, bwrap_path="/nonexistent")
    assert executor.isolation is Isolation.UNAVAILABLE
    result = await executor.run("print(1)")
    assert isinstance(result, ExecutionResult)
    assert not result.success and result.error_category == "refused" and result.isolation == "unavailable"
    assert "bubblewrap" in result.stderr and "CODE_ALLOW_UNSANDBOXED=true" in result.stderr
    assert "unavailable" in describe(executor)


async def test_unsandboxed_when_allowed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "secret")
    executor = LocalExecutor(LIMITS, allow_unsandboxed=True, bwrap_path="/nonexistent")
    assert executor.isolation is Isolation.UNSANDBOXED
    code = "import os\nopen('f','w').write('x')\nprint(sorted(os.environ), os.listdir('.'))"
    result = await executor.run(code)
    assert result.success and result.isolation == "unsandboxed", result.stderr
    assert "TELEGRAM_BOT_TOKEN" not in result.stdout and "['f']" in result.stdout
    memory = await executor.run("x = bytearray(4 * 1024**3)")
    assert memory.error_category == "memory"
    assert "WITHOUT isolation" in describe(executor)


def test_describe_line(executor: LocalExecutor) -> None:
    assert describe(executor).startswith("code sandbox: bwrap (python")
    assert "network off, 5 s, 512 MB" in describe(executor)


# --- CLI ----------------------------------------------------------------------------------------------


def _cli(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "core_tools.code", *args],
        input=code,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        check=False,
    )


@needs_bwrap
def test_cli_prints_one_json_object() -> None:
    done = _cli("print('from cli')\nraise SystemExit(4)", "--language", "python", "--timeout", "5")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["stdout"] == "from cli\n" and result["exit_code"] == 4 and result["success"] is False
    assert result["isolation"] == "bwrap" and result["error_category"] == "runtime"
    assert {"duration_ms", "truncated", "stderr"} <= result.keys()


def test_cli_usage_errors_exit_2() -> None:
    assert _cli("print(1)", "--language", "cobol").returncode == 2
    assert _cli("print(1)", "--timeout", "soon").returncode == 2
