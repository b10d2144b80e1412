"""Real `python -m bot` processes for the tests: a clean environment, start, SIGTERM, SIGKILL and the log.

One place for what several tests need (tests/bot/test_process.py, tests/bot/test_inbox.py, the replicas in
tests/replicas/ and bench/bench_replicas.py): the process gets exactly the environment it is given, so
nothing of the test runner's (a .env, a DATABASE_URL) leaks in.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Self

from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, TOKEN

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A loopback port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def bot_env(home: Path, **values: str) -> dict[str, str]:
    """A clean environment: nothing of the test runner's leaks in; the repo is importable from `home`."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "PYTHONPATH": str(REPO)}
    # No data toolkit, so that no test process installs one at start (tests/bot/test_toolkit.py does).
    env["CODE_PYTHON_ENV"] = ""
    # A message a test sends while an earlier one's answer has not started waits for its own turn, as the
    # test expects; the tests of bursts fold them (MESSAGE_FOLD_BURSTS=true: tests/bot/test_fold.py).
    env["MESSAGE_FOLD_BURSTS"] = "false"
    env.update(values)
    return env


def fake_env(home: Path, tg: FakeTelegram, llm: FakeLLM, database_url: str, **values: str) -> dict[str, str]:
    """A clean environment for a bot that serves the owner against the fake Bot API and the fake LLM."""
    env = bot_env(
        home,
        TELEGRAM_BOT_TOKEN=TOKEN,
        TELEGRAM_API_BASE_URL=tg.base_url,
        ALLOWED_USER_IDS=str(OWNER),
        OPENAI_API_KEY="sk-test",
        OPENAI_BASE_URL=llm.base_url,
        LLM_MAX_RETRIES="0",
        DATABASE_URL=database_url,
    )
    env.update(values)
    return env


def full_env(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, **extra: str) -> dict[str, str]:
    """A clean environment for a bot on a SQLite file under tmp_path, against the fakes (as `fake_env`, with
    the model named)."""
    values = {
        "TELEGRAM_BOT_TOKEN": TOKEN,
        "TELEGRAM_API_BASE_URL": tg.base_url,
        "ALLOWED_USER_IDS": str(OWNER),
        "OPENAI_API_KEY": "sk-test",
        "OPENAI_BASE_URL": llm.base_url,
        "LLM_MODEL": "fake-model",
        "LLM_MAX_RETRIES": "0",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'data' / 'assistant.db'}",
    }
    values.update(extra)
    return bot_env(tmp_path, **values)


async def start_bot(
    cwd: Path, *args: str, env: dict[str, str], capture: bool = True
) -> asyncio.subprocess.Process:
    """Start `python -m bot ...` in `cwd` with exactly `env`; output piped, or dropped for long runs."""
    out = asyncio.subprocess.PIPE if capture else asyncio.subprocess.DEVNULL
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        *args,
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=out,
        stderr=out,
    )


async def run_bot(
    cwd: Path, *args: str, env: dict[str, str], stdin: bytes | None = None, timeout: float = 120
) -> tuple[int, str, str]:
    """Run `python -m bot ...` to its end; returns the exit code, stdout and stderr (a deadline, generous
    for a cold start on a loaded machine, not a speed target)."""
    proc = await start_bot(cwd, *args, env=env)
    out, err = await asyncio.wait_for(proc.communicate(stdin), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


class BotProcess:
    """A `python -m bot` process in the background; its output goes to a log file (a pipe nobody reads
    would fill up and block the bot), which failing tests print."""

    def __init__(
        self, cwd: Path, env: dict[str, str], *args: str, name: str = "bot", prefix: Sequence[str] = ()
    ) -> None:
        self.cwd = cwd
        self.env = env
        self.args = args
        self.name = name
        self.prefix = tuple(prefix)  # a command the bot runs under (e.g. `unshare` for a pid namespace)
        self.log_path = cwd / f"{name}.log"
        self.proc: asyncio.subprocess.Process | None = None
        self._log: IO[bytes] | None = None

    async def start(self) -> Self:
        """Start the process (the log file is appended to, so a restarted one keeps its history)."""
        self.cwd.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self.proc = await asyncio.create_subprocess_exec(
            *self.prefix,
            sys.executable,
            "-m",
            "bot",
            *self.args,
            cwd=self.cwd,
            env=self.env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
        )
        return self

    @property
    def pid(self) -> int:
        """The process id."""
        assert self.proc is not None, "not started"
        return self.proc.pid

    @property
    def running(self) -> bool:
        """Started and not exited yet."""
        return self.proc is not None and self.proc.returncode is None

    def log(self) -> str:
        """Everything the process wrote so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def tail(self, lines: int = 30) -> str:
        """The last lines of the log, headed by the process's name (for assertion messages)."""
        return f"--- {self.name} (pid {self.proc.pid if self.proc else '-'}) ---\n" + "\n".join(
            self.log().splitlines()[-lines:]
        )

    async def kill(self) -> None:
        """SIGKILL: the process gets no chance to clean up, as after a power cut or the OOM killer."""
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGKILL)
        await self.wait()

    async def stop(self, timeout: float = 30) -> int:
        """SIGTERM and wait for the exit (SIGKILL after `timeout`); returns the exit code."""
        if self.running:
            assert self.proc is not None
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout)
            except TimeoutError:
                self.proc.kill()
        return await self.wait()

    async def wait(self) -> int:
        """Wait for the exit; returns the exit code."""
        assert self.proc is not None, "not started"
        code = await self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
        return code


@asynccontextmanager
async def bot_process(
    cwd: Path, env: dict[str, str], *args: str, name: str = "bot"
) -> AsyncIterator[BotProcess]:
    """A started `python -m bot` process that is killed at the end if it still runs."""
    process = await BotProcess(cwd, env, *args, name=name).start()
    try:
        yield process
    finally:
        await process.kill()
