"""The sandbox's data toolkit (numpy, pandas, matplotlib): where it lives, whether code runs can use it, and
its installation at the bot's first start.

The toolkit is a venv of the interpreter the sandbox runs, made by `scripts/sandbox-toolkit.sh` from the
pinned `sandbox/requirements.txt` and bound read-only into each run (CODE_PYTHON_ENV, by default
`data/sandbox-python`). A bot whose toolkit is missing or older than the requirements installs it in the
background at start, so that it answers meanwhile; a Python run that starts while it installs waits for it
(bounded), because "plot column B" must not fail on a first start for want of pandas. The script is the one
installer (the Docker image and the test suite use it too): it locks the target, imports every package
before it writes the stamp (the requirements' hash), and leaves an up-to-date target alone. After it, one run
through the real sandbox imports the packages: only then does the code tool say that Python has them.

A bot run by root starts bwrap as an unprivileged uid, which must be able to enter every directory above
the toolkit. When it cannot (a checkout in a 0700 home or `mktemp -d`), the toolkit is kept in a place of
its own under SHARED_PLACE instead, which it can enter; the log says so. Nothing else moves: the bot's data
stays where it is, and runs still see only the toolkit.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from core_tools.sandbox.executor import LocalExecutor
from core_tools.sandbox.isolation import SANDBOX_UID, closed_to_runs, find_interpreters, hidden_from_runs
from core_tools.sandbox.model import Executor, Isolation

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
REQUIREMENTS = REPO / "sandbox" / "requirements.txt"
INSTALLER = REPO / "scripts" / "sandbox-toolkit.sh"
STAMP = ".requirements.sha256"
DEFAULT_ENV = "data/sandbox-python"
# Where a toolkit goes whose own place the sandbox could not enter: one directory per configured place.
SHARED_PLACE = Path("/var/cache/assistant-sandbox")
INSTALL_TIMEOUT_S = 1800.0  # a slow mirror, not a hang: past this the install counts as failed
# What the installer may see of the bot's environment: enough for uv to find its cache, the index and a
# proxy; never the bot's secrets.
_INSTALLER_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "UV", "NO_PROXY", "no_proxy")
_INSTALLER_ENV_PREFIXES = ("UV_", "XDG_", "SSL_CERT_", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")

State = Literal["off", "service", "missing", "installing", "ready", "failed"]


class ToolkitError(Exception):
    """The toolkit could not be installed or used: the reason, then what to do."""


def packages(requirements: Path = REQUIREMENTS) -> list[str]:
    """The distribution names the requirements pin, in order (numpy, pandas, matplotlib)."""
    try:
        lines = requirements.read_text(encoding="utf-8").splitlines()
    except OSError:
        return ["numpy", "pandas", "matplotlib"]  # the image's runtime has no requirements file
    names = [re.split(r"[=<>!~;\[\s]", line.split("#", 1)[0].strip(), maxsplit=1)[0] for line in lines]
    return [n for n in names if n]


def spoken(names: list[str]) -> str:
    """ "numpy, pandas and matplotlib"."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def wanted_stamp(requirements: Path = REQUIREMENTS) -> str | None:
    """The hash the installer writes for these requirements (sha256sum of the file), None without it."""
    try:
        return hashlib.sha256(requirements.read_bytes()).hexdigest()
    except OSError:
        return None


def is_current(env: Path, requirements: Path = REQUIREMENTS) -> bool:
    """Whether `env` holds an install of these requirements (without them, as in the Docker image's
    runtime, any finished install counts)."""
    try:
        stamp = (env / STAMP).read_text(encoding="utf-8").strip()
    except OSError:
        return False
    if not os.access(env / "bin" / "python3", os.X_OK):
        return False
    want = wanted_stamp(requirements)
    return want is None or stamp == want


def visibility_problem(env: str) -> str | None:
    """Why code runs could not see a toolkit at `env`, or None."""
    return hidden_from_runs(Path(env).expanduser())


def place_for(env: Path) -> tuple[Path, str]:
    """Where the toolkit configured at `env` is installed and run from, and why when that is not `env`
    ("" when it is)."""
    closed = closed_to_runs(env)
    if closed is None or closed_to_runs(SHARED_PLACE.parent) is not None:
        return env, ""  # there (or nowhere better: the check after the install says what to do)
    where, mode = closed
    digest = hashlib.sha256(str(env.resolve()).encode()).hexdigest()[:12]
    place = SHARED_PLACE / f"{env.name}-{digest}"
    why = (
        f"code runs (uid {SANDBOX_UID}) cannot enter {where} (mode {mode:04o}) above {env}, so the toolkit "
        f"is kept at {place}"
    )
    return place, why


def _make_shared_place() -> None:
    """SHARED_PLACE, owned by root and enterable by every uid (whatever the umask)."""
    try:
        SHARED_PLACE.mkdir(parents=True, exist_ok=True)
        os.chmod(SHARED_PLACE, 0o755)  # noqa: S103 - public packages, which the sandbox's uid must read
    except OSError as exc:
        raise ToolkitError(
            f"cannot make {SHARED_PLACE} ({exc.strerror}). Fix: set CODE_PYTHON_ENV to a directory whose "
            "parents every user may enter, such as /opt/assistant-sandbox, then restart"
        ) from exc


def import_check(names: list[str]) -> str:
    """A program that imports every package and prints `name version` for each (a failure is its exit)."""
    mods = ", ".join(re.sub(r"[-.]", "_", n.lower()) for n in names)
    return (
        f"import importlib.metadata as m\nimport {mods}\n"
        f"print(', '.join(f'{{n}} {{m.version(n)}}' for n in {names!r}))\n"
    )


def _installer_env(python: str | None) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k in _INSTALLER_ENV or k.upper().startswith(_INSTALLER_ENV_PREFIXES)
    }
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    if python:
        env["SANDBOX_SYSTEM_PYTHON"] = python
    return env


def _fix(output: str, env: Path) -> str:
    """What the operator can do about an installer failure, from its output."""
    by_hand = f"or install it by hand to see every message: scripts/sandbox-toolkit.sh {env}"
    if "is not a Python environment" in output:
        return f"set CODE_PYTHON_ENV to an empty or new directory (default {DEFAULT_ENV})"
    if "uv not found" in output:
        return f"install uv (pip install uv) and restart the bot, {by_hand}"
    if "Permission denied" in output or "Read-only file system" in output:
        return (
            f"let the bot write {env.parent}, or set CODE_PYTHON_ENV to a directory it can write "
            f"(default {DEFAULT_ENV}), {by_hand}"
        )
    if re.search(r"(?i)dns|resolve|connect|network|timed out|index", output):
        return f"check that this machine reaches the package index (PyPI), then restart the bot, {by_hand}"
    return f"restart the bot to try again, {by_hand}"


async def run_installer(env: Path, python: str | None, timeout_s: float = INSTALL_TIMEOUT_S) -> str:
    """Run scripts/sandbox-toolkit.sh into `env` (locked, idempotent); its last line, or ToolkitError.

    The script and everything it starts are one process group, ended with it if this is cancelled."""
    proc = await asyncio.create_subprocess_exec(
        "bash",
        str(INSTALLER),
        str(env),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=_installer_env(python),
        start_new_session=True,
    )
    try:
        async with asyncio.timeout(timeout_s):
            out, _ = await proc.communicate()
    except BaseException:  # cancelled (the bot stops) or too slow: nothing of it may stay behind
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        raise
    text = out.decode(errors="replace").strip()
    if proc.returncode != 0:
        lines = [line for line in text.splitlines() if line.strip()]
        reason = " / ".join(lines[-3:]) or f"exit {proc.returncode}"
        raise ToolkitError(f"the installer failed ({reason[-600:]}). Fix: {_fix(text, env)}")
    return text.splitlines()[-1] if text else "installed"


def install_blocking(env: Path) -> str:
    """Install the toolkit at `env` now (or find it up to date), blocking: for the test suite and scripts."""
    python = find_interpreters().get("python")
    return asyncio.run(run_installer(env, python.path if python else None))


@dataclass(frozen=True)
class Report:
    """The doctor's view of the toolkit: ok, a warning, or a failure with its fix."""

    level: Literal["ok", "warn", "fail"]
    detail: str
    fix: str = ""


class Toolkit:
    """The data toolkit of the code tool's executor: used when installed, installed in the background when
    not (`start`), and described to the model as it is."""

    def __init__(
        self,
        env: str | None,
        executor: Executor,
        requirements: Path = REQUIREMENTS,
        on_change: Callable[[], None] | None = None,
    ) -> None:
        """`env` is CODE_PYTHON_ENV (None: no toolkit); `executor` runs the code (a sandbox service has its
        own toolkit, which is only checked here); `on_change` is told when the state changes."""
        # CODE_PYTHON_ENV as configured, and the place really used (`place_for`: elsewhere when the
        # sandbox could not enter it)
        self.configured = Path(env).expanduser().absolute() if env else None
        self.env = self.configured
        self.moved = ""
        if self.configured is not None and isinstance(executor, LocalExecutor):
            self.env, self.moved = place_for(self.configured)
            if self.moved:
                log.info("sandbox toolkit: %s", self.moved)
        self.executor = executor
        self.requirements = requirements
        self.packages = packages(requirements)
        self.reason = ""
        self.versions = ""
        # Told when the state changes (the code tool's description is registered again).
        self.on_change = on_change
        self._task: asyncio.Task[None] | None = None
        self._done = asyncio.Event()
        self.state: State
        if not isinstance(executor, LocalExecutor):
            self.state = "service"
        elif self.env is None:
            self.state = "off"
        elif is_current(self.env, requirements) and executor.use_python_env(str(self.env)):
            self.state = "ready"
        else:
            self.state = "missing"
        if self.state != "missing":
            self._done.set()

    @property
    def usable(self) -> bool:
        """Whether a Python run has the packages (or will, once the install it waits for ends)."""
        return self.state in ("ready", "installing", "service")

    def model_note(self) -> str:
        """The sentence of the code tool's description about Python's packages: only what runs can use."""
        names = spoken(self.packages)
        if self.state in ("ready", "service"):
            return f"Python has {names} (no display: save figures to out/)."
        if self.state == "installing":
            return (
                f"Python's {names} are being installed (the bot's first start): a Python run waits for "
                "them; save figures to out/."
            )
        return "Python has only its standard library: no third-party packages are installed."

    def _changed(self) -> None:
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception:  # the description stays as it was; the runs are not affected
                log.exception("could not update the code tool's description")

    def start(self) -> None:
        """Install in the background when missing or outdated (needs a running event loop)."""
        if self.state != "missing" or self._task is not None:
            return
        assert self.env is not None
        self.state = "installing"
        self._done.clear()
        log.info(
            "sandbox toolkit: installing %s into %s in the background (first start: about 250 MB, a minute "
            "or two); the bot answers meanwhile, and Python code runs wait for it",
            spoken(self.packages),
            self.env,
        )
        self._task = asyncio.create_task(self._install(), name="sandbox-toolkit")
        self._changed()

    async def _install(self) -> None:
        assert self.env is not None and isinstance(self.executor, LocalExecutor)
        started = time.monotonic()
        python = find_interpreters().get("python")
        try:
            if self.moved:
                _make_shared_place()
            await run_installer(self.env, python.path if python else None)
            if not self.executor.use_python_env(str(self.env)):
                raise ToolkitError(
                    f"{self.env} is not a usable environment after the install. Fix: remove it and restart"
                )
            problem = await self._verify()
            if problem is not None:
                self.executor.use_python_env(None)
                raise ToolkitError(problem)
        except asyncio.CancelledError:
            self.state = "missing"
            raise
        except Exception as exc:
            self.state, self.reason = "failed", str(exc)
            log.error(
                "sandbox toolkit: not installed at %s: %s. Until then sandboxed Python has only its standard "
                "library",
                self.env,
                exc,
            )
        else:
            self.state = "ready"
            log.info(
                "sandbox toolkit: ready at %s (%s), installed in %.0f s",
                self.env,
                self.versions,
                time.monotonic() - started,
            )
        finally:
            self._done.set()
            self._changed()

    async def _verify(self) -> str | None:
        """Import every package in a real sandbox run; None when it works, else the reason and fix."""
        if self.executor.isolation is Isolation.UNAVAILABLE:
            return None  # every run is refused anyway; the doctor's sandbox line says why
        result = await self.executor.run(import_check(self.packages), "python", 60.0)
        if result.success:
            self.versions = result.stdout.strip()
            return None
        tail = (result.stderr or result.stdout).strip().splitlines()[-1:] or [f"exit {result.exit_code}"]
        where = self.env or "the sandbox service's environment"
        fix = (
            f"make every directory above {where} searchable for others (chmod o+x) when the bot runs as "
            "root, or set CODE_PYTHON_ENV to a directory such as /opt/assistant-sandbox, then restart"
        )
        return f"a sandboxed run cannot import {spoken(self.packages)} ({tail[0][:300]}). Fix: {fix}"

    async def wait_for_install(self, progress: Callable[[str], Awaitable[None]], timeout_s: float) -> None:
        """Before a Python run: wait (at most `timeout_s`) for an install in progress, saying so (a toolkit
        nobody started to install, as in `python -m bot mcp`, is not waited for)."""
        if self.state != "installing":
            return
        await progress(f"installing {spoken(self.packages)} for the code sandbox (first start)...")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await self._done.wait()

    def run_note(self) -> str | None:
        """What a Python run's result should tell the model when it ran without the packages."""
        if self.state == "installing":
            return (
                f"{spoken(self.packages)} are still being installed: this run had only the standard "
                "library. Try again in a minute."
            )
        if self.state == "failed":
            return f"{spoken(self.packages)} could not be installed: this run had only the standard library."
        return None

    async def probe(self) -> Report:
        """Import the packages in a real run (the doctor's check): what runs can use, or why not."""
        if self.state == "off":
            return Report("ok", "off (CODE_PYTHON_ENV is empty): sandboxed Python has its standard library")
        if self.state in ("missing", "installing", "failed") and self.env is not None:
            return Report(
                "warn",
                f"{spoken(self.packages)} not installed at {self.env} yet",
                "start the bot, which installs them there in the background, or install them now: "
                f"scripts/sandbox-toolkit.sh {self.env}",
            )
        if self.executor.isolation is Isolation.UNAVAILABLE:
            return Report("warn", "not checked: the sandbox refuses every run (see the sandbox line)")
        problem = await self._verify()
        if problem is not None:
            text, _, fix = problem.partition(" Fix: ")
            return Report("fail", text, fix)
        where = f" at {self.env}" if self.env else " in the sandbox service"
        return Report("ok", f"{self.versions}{where}")

    async def aclose(self) -> None:
        """Stop an install in progress (the installer's processes end with it)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
