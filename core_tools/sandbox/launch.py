"""Starting a run's processes: in the run's own cgroup from their first page and, when asked, ahead of time.

Why a launcher: moving a process into a cgroup makes the kernel wait for an RCU grace period (about 10 ms
on cgroup v1, a third of a whole `print(1)` run). So the run's first process is `/bin/sh` waiting for one
line on its stdin; a worker thread moves it into the run's cgroup meanwhile (the event loop never waits for
the grace period), and only then is the line sent and the shell execs the real command (bwrap). Everything
the run starts is charged to its cgroup from its first page, as when the child joined before its own exec.
(cgroup v2's CLONE_INTO_CGROUP would create the child in place, but Python's subprocess cannot ask clone3
for it; and a launcher started ahead pays the move off the request path on both versions alike.)

Why ahead: nothing of a sandbox depends on the program but its shape (`Shape`: the language, ES module
syntax in JavaScript, whether files go in or come out). bwrap sets up the namespaces and mounts, prlimit
sets the limits, and the interpreter starts and then waits for its program on stdin. `Ahead` keeps such
sandboxes ready, each in a fresh cgroup and never used twice: a run takes one and only writes its program,
and a replacement is started at once. What a run can do is the same; what it waits for is not.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from core_tools.sandbox.cgroup import RunCgroup, die_with_parent
from core_tools.sandbox.isolation import SANDBOX_UID, Interpreter, drop_privileges
from core_tools.sandbox.model import RunWatcher

log = logging.getLogger(__name__)

# The launcher's script: it goes on only while its parent is still the process that started it (one that
# died first could not kill it any more), reads one line (a byte at a time, as every POSIX shell does on a
# pipe: the program after it stays in the pipe), then becomes the command. Without the line (the executor
# gave up) it exits and runs nothing.
_SCRIPT = '[ "$PPID" = {parent} ] && read -r _ && exec "$@"'
_REAP_GRACE_S = 5.0  # how long bwrap gets to reap its namespace after its init was killed
MAX_AGE_S = 600.0  # a sandbox waits at most this long: it shows /etc files and the interpreter as they were
KEEP_SHAPE_S = 3600.0  # a shape not used for this long is no longer kept ready once its sandbox ages out
MAX_SHAPES = 3  # shapes kept ready at once (the least recently used one goes first)


@dataclass(frozen=True)
class Shape:
    """What a sandbox is started for before its program is known."""

    language: str
    interpreter: Interpreter
    module: bool = False  # JavaScript with ES module syntax: node is told before it reads the program
    files_in: bool = False  # in/ is bound (from a host directory filled before the program is sent)
    files_out: bool = False  # out/ exists and comes back as a tar through a pipe


@dataclass(eq=False)
class Launched:
    """A run's started processes and what belongs to them until they are gone."""

    proc: asyncio.subprocess.Process
    shape: Shape
    cgroup: RunCgroup | None
    in_dir: str | None = None  # the host directory bound as in/ (sandboxed runs with files in)
    scratch: str | None = None  # the working directory of an unsandboxed run
    pipe: list[int] | None = None  # [read end, -1]: the tar of out/ comes through it
    born: float = field(default_factory=time.monotonic)


def _kill_group(pid: int) -> None:
    """SIGKILL the child's process group (the child and whatever did not leave its group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def children(pid: int) -> list[int]:
    """Direct children of `pid`, from /proc (the `children` file, else a scan of every stat file)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
            return [int(p) for p in handle.read().split()]
    except OSError:
        pass
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with (
            contextlib.suppress(OSError, ValueError, IndexError),
            open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle,
        ):
            if int(handle.read().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


async def stop(proc: asyncio.subprocess.Process, sandboxed: bool) -> None:
    """Kill everything the run started and reap it before returning.

    In a sandbox we SIGKILL bwrap's pid-namespace init, not bwrap itself: the kernel kills every process
    in the namespace, and bwrap only exits after reaping that init, which in turn cannot finish exiting
    before the namespace is empty. So once `proc.wait()` returns nothing the code started is left (not even
    a zombie). Killing bwrap first would orphan the init instead.

    On a normal exit bwrap leaves as soon as its init reports the program's status; the init then
    exits and the kernel kills whatever is left in the namespace. That window is microseconds (40 runs
    that left a daemonised `sleep` behind found none alive right after `run` returned). The init itself may
    still be finishing its exit then (unmounting, its memory already gone: no code of the run is left); the
    removal of the run's cgroup waits for it.
    """
    inits = children(proc.pid) if proc.returncode is None and sandboxed else []
    # No init yet (a sandbox stopped while it was still starting): there is nothing to reap, and bwrap
    # itself can go at once; an init it forks after this dies with it (--die-with-parent).
    for child in inits:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGKILL)
    if inits:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(proc.wait()), _REAP_GRACE_S)
    _kill_group(proc.pid)
    await proc.wait()


_SETPRIV: list[str | None] = []


def find_setpriv() -> str | None:
    """util-linux `setpriv` if it can set the parent-death signal (looked up once per process)."""
    if not _SETPRIV:
        found = None
        for candidate in ("/usr/bin/setpriv", "/bin/setpriv"):
            if os.access(candidate, os.X_OK):
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    helptext = subprocess.run(
                        [candidate, "--help"], capture_output=True, text=True, timeout=10, check=False
                    ).stdout
                    if "--pdeathsig" in helptext:
                        found = candidate
                        break
        _SETPRIV.append(found)
    return _SETPRIV[0]


def launcher() -> tuple[list[str], dict[str, Any]]:
    """The launcher's command and the Popen arguments that go with it.

    With `setpriv` the child drops to the sandbox's uid (when we are root) and asks to be killed when we
    die by itself, so Popen needs no preexec_fn and no user=: it then uses vfork, which does not copy this
    (possibly large) process's page tables and blocks the event loop for a fraction of a millisecond.
    Without it the forked child does both in Python (`die_with_parent`).
    """
    script = ["/bin/sh", "-c", _SCRIPT.format(parent=os.getpid()), "sandbox-launcher"]
    setpriv = find_setpriv()
    if setpriv is None:
        kwargs: dict[str, Any] = dict(drop_privileges())
        kwargs["preexec_fn"] = die_with_parent(os.getpid())  # after Popen's own user= switch
        return script, kwargs
    prefix = [setpriv]
    if os.geteuid() == 0:
        uid = str(SANDBOX_UID)
        prefix += ["--reuid", uid, "--regid", uid, "--clear-groups"]
    # The parent-death signal last: the kernel clears it on every uid/gid change.
    return [*prefix, "--pdeathsig", "KILL", "--", *script], {}


async def spawn(
    argv: list[str],
    *,
    cwd: str,
    env: dict[str, str],
    pass_fds: tuple[int, ...],
    cgroup: RunCgroup | None,
    guardian: RunWatcher | None,
) -> tuple[asyncio.subprocess.Process, RunCgroup | None]:
    """Start `argv` behind the launcher (as the sandbox's uid when we are root) inside `cgroup`; the
    process and its cgroup.

    A worker thread moves the launcher into the cgroup before it is told to go on. When the kernel refuses
    the move, the cgroup is removed and None comes back: the watchdog bounds that run.
    """
    prefix, kwargs = launcher()
    if pass_fds:
        kwargs["pass_fds"] = pass_fds
    proc = await asyncio.create_subprocess_exec(
        *prefix,
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=cwd,
        env=env,
        close_fds=True,
        start_new_session=True,
        **kwargs,
    )
    if guardian is not None:
        guardian.started(proc.pid)
    try:
        if cgroup is not None:
            try:
                await asyncio.to_thread(cgroup.add, proc.pid)
            except OSError as exc:
                log.warning("a run could not join its cgroup (%s): its watchdog bounds it", exc)
                cgroup.release()
                cgroup = None
        assert proc.stdin is not None
        proc.stdin.write(b"\n")  # go: the launcher execs the command
    except BaseException:
        await stop(proc, sandboxed=False)  # only the launcher can be there: it had not read the line
        if guardian is not None:
            guardian.finished(proc.pid)
        raise
    return proc, cgroup


@dataclass(eq=False)
class _Coming:
    """A sandbox being started ahead; a run that finds none ready claims one of these and waits for it."""

    shape: Shape
    task: asyncio.Task[Launched | None] | None = None
    claimed: bool = False


class Ahead:
    """Sandboxes started ahead of their runs: `per_shape` ready for each shape used lately."""

    def __init__(
        self,
        launch: Callable[[Shape], Awaitable[Launched]],
        discard: Callable[[Launched], Awaitable[None]],
        per_shape: int,
        *,
        max_age_s: float = MAX_AGE_S,
        keep_shape_s: float = KEEP_SHAPE_S,
        max_shapes: int = MAX_SHAPES,
    ) -> None:
        """`launch` starts one sandbox of a shape; `discard` kills and removes one that was not used."""
        self._launch = launch
        self._discard = discard
        self.per_shape = per_shape
        self.max_age_s = max_age_s
        self.keep_shape_s = keep_shape_s
        self.max_shapes = max_shapes
        self._ready: dict[Shape, list[Launched]] = {}
        self._coming: dict[Shape, list[_Coming]] = {}
        self._used: dict[Shape, float] = {}  # when each shape was last taken, least recent first
        self._tasks: set[asyncio.Task[Any]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    def ready(self, shape: Shape | None = None) -> int:
        """How many sandboxes (of one shape) are started and waiting for a program."""
        if shape is not None:
            return len(self._ready.get(shape, []))
        return sum(len(entries) for entries in self._ready.values())

    async def take(self, shape: Shape) -> Launched:
        """A sandbox of this shape for a run: one started ahead if any, else one started now."""
        self._own_loop()
        entry = await self._claim(shape)
        if not self._closed and self.per_shape > 0:
            self._used.pop(shape, None)
            self._used[shape] = time.monotonic()
            self._refill(shape)
            self._forget_old_shapes()
        return entry if entry is not None else await self._launch(shape)

    async def prepare(self, shape: Shape) -> bool:
        """Have one sandbox of this shape ready (started now if needed); False if it could not start."""
        self._own_loop()
        if self._closed or self.per_shape <= 0:
            return False
        if self.ready(shape):
            return True
        self._used.setdefault(shape, time.monotonic())
        self._refill(shape)
        for coming in list(self._coming.get(shape, [])):
            assert coming.task is not None
            await asyncio.wait({coming.task})
        return self.ready(shape) > 0

    def drop(self, stale: Callable[[Shape], bool]) -> None:
        """Stop keeping sandboxes of the shapes `stale` picks (e.g. of an interpreter no longer used)."""
        for shape in [s for s in {*self._used, *self._ready, *self._coming} if stale(s)]:
            self._used.pop(shape, None)
            for entry in self._ready.pop(shape, []):
                self._drop(entry)
            for coming in self._coming.pop(shape, []):
                if coming.task is not None:
                    coming.task.cancel()

    async def aclose(self) -> None:
        """Stop starting sandboxes and remove every one that waits (none is left running)."""
        self._closed = True
        for waiting in self._coming.values():
            for coming in waiting:
                if coming.task is not None:
                    coming.task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        entries = [entry for ready in self._ready.values() for entry in ready]
        self._ready.clear()
        self._coming.clear()
        await asyncio.gather(*(self._discard(entry) for entry in entries), return_exceptions=True)

    # --- inside ---------------------------------------------------------------------------------------

    async def _claim(self, shape: Shape) -> Launched | None:
        """A ready sandbox of this shape, else one being started (waited for: it is ahead of a new one)."""
        ready = self._ready.get(shape, [])
        now = time.monotonic()
        while ready:
            entry = ready.pop(0)
            if entry.proc.returncode is None and now - entry.born < self.max_age_s:
                return entry
            self._background(self._discard(entry))
        coming = self._coming.get(shape, [])
        if not coming:
            return None
        claim = coming.pop(0)
        claim.claimed = True
        assert claim.task is not None
        try:
            return await asyncio.shield(claim.task)
        except asyncio.CancelledError:
            claim.task.add_done_callback(self._discard_result)  # the run was stopped before it ran
            raise
        except Exception:
            return None

    def _discard_result(self, task: asyncio.Task[Launched | None]) -> None:
        """Remove the sandbox a finished start produced for nobody."""
        if not task.cancelled() and task.exception() is None and (entry := task.result()) is not None:
            self._background(self._discard(entry))

    def _refill(self, shape: Shape) -> None:
        """Start sandboxes of this shape until `per_shape` are ready or coming."""
        have = len(self._ready.get(shape, [])) + len(self._coming.get(shape, []))
        for _ in range(self.per_shape - have):
            coming = _Coming(shape)
            coming.task = asyncio.get_running_loop().create_task(self._start(coming))
            self._tasks.add(coming.task)
            coming.task.add_done_callback(self._tasks.discard)
            self._coming.setdefault(shape, []).append(coming)

    async def _start(self, coming: _Coming) -> Launched | None:
        """Start one sandbox ahead; it goes to the run that claimed it, else it waits among the ready."""
        try:
            entry = await self._launch(coming.shape)
        except Exception as exc:  # the run that comes starts its own and reports what fails
            log.debug("a sandbox could not be started ahead: %s", exc)
            entry = None
        if coming.claimed:
            return entry
        with contextlib.suppress(ValueError):
            self._coming.get(coming.shape, []).remove(coming)
        if entry is not None:
            if self._closed or coming.shape not in self._used:
                self._background(self._discard(entry))
                return None
            self._ready.setdefault(coming.shape, []).append(entry)
            asyncio.get_running_loop().call_later(self.max_age_s, self._age_out, entry)
        return None

    def _age_out(self, entry: Launched) -> None:
        """A sandbox waited `max_age_s`: replace it, if its shape was used lately."""
        ready = self._ready.get(entry.shape, [])
        if self._closed or entry not in ready:
            return  # taken meanwhile
        ready.remove(entry)
        self._background(self._discard(entry))
        if time.monotonic() - self._used.get(entry.shape, float("-inf")) < self.keep_shape_s:
            self._refill(entry.shape)
        else:
            self._used.pop(entry.shape, None)

    def _forget_old_shapes(self) -> None:
        """Keep at most `max_shapes` shapes ready: the least recently used go first."""
        while len(self._used) > self.max_shapes:
            self.drop(next(iter(self._used)).__eq__)

    def _drop(self, entry: Launched) -> None:
        """Remove a sandbox nobody will take: on its own event loop in the background, else at once."""
        with contextlib.suppress(RuntimeError):
            if asyncio.get_running_loop() is self._loop:
                self._background(self._discard(entry))
                return
        _kill_group(entry.proc.pid)  # bwrap's sandbox dies with it (--die-with-parent)
        if entry.cgroup is not None:
            entry.cgroup.release()

    def _background(self, work: Awaitable[Any]) -> None:
        """Run cleanup work on the loop; aclose waits for it."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _own_loop(self) -> None:
        """Sandboxes belong to the event loop that started them: under another loop, forget them (killed)."""
        loop = asyncio.get_running_loop()
        if self._loop is None or self._loop is loop:
            self._loop = loop
            return
        for ready in self._ready.values():
            for entry in ready:
                self._drop(entry)  # at once: its own loop is not running
        self._loop = loop
        self._ready.clear()
        self._coming.clear()
        self._tasks.clear()
