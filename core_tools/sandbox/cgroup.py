"""A memory cgroup per code run, so `memory_mb` bounds the whole run: every process and every tmpfs page.

Why a cgroup: RLIMIT_AS is per process (six forked children held 2.4 GB under a 512 MB limit), and tmpfs
pages belong to no process at all. The kernel charges anonymous memory *and* tmpfs/shmem pages to the cgroup
of the task that touched them, so one cgroup holding bwrap and everything it starts covers /tmp, /scratch,
/dev/shm, SysV shm and memfds alike. On overflow the kernel OOM-kills inside that cgroup only.

Run cgroups are created as children of the cgroup this process already sits in, never at a hierarchy's
root, and are named after our pid so that ones left behind by a crashed process can be swept.
cgroup v2 forbids processes in a cgroup that hands controllers to children ("no internal processes"), so
there we first move this process into a leaf `bot` of its own cgroup, but only when it is alone there
(a delegated service or scope); otherwise, or when nothing is writable (a container's read-only
/sys/fs/cgroup, a user without delegation), `find_run_parent` says why and the executor uses its watchdog.
"""

from __future__ import annotations

import contextlib
import ctypes
import itertools
import logging
import os
import queue
import re
import signal
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_PREFIX = "sandbox-run-"
_COUNTER = itertools.count()
_EMPTY_WAIT_S = 5.0  # how long removal waits for killed tasks to leave before giving up on rmdir
_PR_SET_PDEATHSIG = 1
# Loaded here, in the parent: a preexec_fn runs after fork, where loading a library is not safe.
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl


def die_with_parent(parent_pid: int) -> Callable[[], None]:
    """A `preexec_fn` step: SIGKILL this child when `parent_pid` dies; exits at once if it already has.

    The kernel clears PR_SET_PDEATHSIG on every uid/gid change, so this must come after the last one
    (Popen's user=/group= run before preexec_fn).
    bwrap's own --die-with-parent only starts after bwrap has cloned its sandbox: a service killed in
    between left the whole run behind. The getppid check closes the window before the prctl.
    """

    def arm() -> None:
        _PRCTL(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent_pid:
            os._exit(1)

    return arm


@dataclass(frozen=True)
class RunParent:
    """Where run cgroups are created: a directory of cgroup version 1 (memory controller) or 2."""

    path: Path
    version: int

    @property
    def label(self) -> str:
        """For the startup line: which bound holds the run."""
        return f"cgroup v{self.version} (whole run)"


def _mounts() -> list[tuple[str, str, str, str]]:
    """(mount root, mount point, fs type, super options) of every cgroup mount we can see."""
    found = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            left, _, right = line.partition(" - ")
            fields, rest = left.split(), right.split()
            if len(fields) >= 5 and len(rest) >= 3 and rest[0] in ("cgroup", "cgroup2"):
                found.append((fields[3], fields[4].replace("\\040", " "), rest[0], rest[2]))
    return found


def _own_dir(version: int) -> Path | None:
    """This process's cgroup directory in the v2 hierarchy, or in the v1 memory hierarchy."""
    try:
        lines = Path("/proc/self/cgroup").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    own = None
    for line in lines:
        _id, controllers, path = [*line.split(":", 2), "", ""][:3]
        if (version == 2 and _id == "0" and controllers == "") or (
            version == 1 and "memory" in controllers.split(",")
        ):
            own = path
    if own is None:
        return None
    for root, point, fstype, options in _mounts():
        if (version == 2 and fstype == "cgroup2") or (
            version == 1 and fstype == "cgroup" and "memory" in options.split(",")
        ):
            relative = own if root == "/" else own.removeprefix(root) if own.startswith(root) else None
            if relative is not None:
                return Path(point) / relative.lstrip("/")
    return None


def _pids(path: Path) -> list[int]:
    """The processes in a cgroup (empty when it is gone)."""
    try:
        return [int(p) for p in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _alive(pid: int) -> bool:
    """Whether a process with this pid exists."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _try_create(parent: Path) -> str | None:
    """Create and remove one run cgroup to prove we may; None when it worked, else the reason."""
    probe = parent / f"{_PREFIX}{os.getpid()}-probe-{uuid.uuid4().hex[:8]}"
    try:
        probe.mkdir()
    except OSError as exc:
        return f"cannot create a cgroup in {parent}: {exc.strerror or exc}"
    with contextlib.suppress(OSError):
        probe.rmdir()
    return None


def _v2_parent(own: Path) -> RunParent | str:
    """Our v2 cgroup made ready to hold run cgroups (this process moved to a leaf), or why not."""
    controllers = (own / "cgroup.controllers").read_text().split()
    if "memory" not in controllers:
        return f"cgroup v2: no memory controller delegated to {own}"
    if "memory" not in (own / "cgroup.subtree_control").read_text().split():
        others = [pid for pid in _pids(own) if pid != os.getpid()]
        if others:
            return f"cgroup v2: {own} holds other processes, so it cannot hand memory to children"
        if _pids(own):
            leaf = own / "bot"
            try:
                leaf.mkdir(exist_ok=True)
                (leaf / "cgroup.procs").write_text(str(os.getpid()))
            except OSError as exc:
                return f"cgroup v2: cannot move this process into {leaf}: {exc.strerror or exc}"
        try:
            (own / "cgroup.subtree_control").write_text("+memory")
        except OSError as exc:
            return f"cgroup v2: cannot enable memory for children of {own}: {exc.strerror or exc}"
        with contextlib.suppress(OSError):  # nice to have: RLIMIT_NPROC already bounds processes
            (own / "cgroup.subtree_control").write_text("+pids")
    return RunParent(own, 2)


_FOUND: list[RunParent | str] = []


def find_run_parent() -> RunParent | str:
    """The cgroup under which runs get their own cgroup, or why there is none; looked up once per process.

    Once: on cgroup v2 the first lookup moves this process into a leaf, and a second would nest again.
    """
    if not _FOUND:
        found = _find_run_parent()
        if isinstance(found, RunParent):
            sweep_stale(found)
        _FOUND.append(found)
    return _FOUND[0]


def _find_run_parent() -> RunParent | str:
    """Uncached `find_run_parent`: v2 first (most hosts), then the v1 memory hierarchy."""
    reasons = []
    own2 = _own_dir(2)
    if own2 is not None and (own2 / "cgroup.controllers").exists():
        if not (own2.parent / "cgroup.controllers").exists():
            reasons.append("cgroup v2: this process sits at the root of the hierarchy it sees")
        else:
            try:
                found = _v2_parent(own2)
            except OSError as exc:
                found = f"cgroup v2: {exc.strerror or exc}"
            if isinstance(found, RunParent):
                failure = _try_create(found.path)
                if failure is None:
                    return found
                found = f"cgroup v2: {failure}"
            reasons.append(found)
    own1 = _own_dir(1)
    if own1 is not None and (own1 / "memory.limit_in_bytes").exists():
        if not (own1.parent / "memory.limit_in_bytes").exists():
            reasons.append("cgroup v1: this process sits at the root of the memory hierarchy it sees")
        else:
            failure = _try_create(own1)
            if failure is None:
                return RunParent(own1, 1)
            reasons.append(f"cgroup v1: {failure}")
    return "; ".join(reasons) or "no cgroup memory controller found"


def sweep_stale(parent: RunParent) -> int:
    """Kill and remove run cgroups left by processes that no longer exist (a crash mid-run); how many went.

    Also those named after our own pid: called before we create any, they are a dead predecessor's that
    had the same pid (a container's service is always pid 1).
    """
    removed = 0
    for entry in parent.path.glob(f"{_PREFIX}*"):
        match = re.match(rf"{_PREFIX}(\d+)-", entry.name)
        if match is None:
            continue
        owner = int(match.group(1))
        if owner != os.getpid() and _alive(owner):
            continue
        removed += empty_and_remove(entry)
    return removed


def runs_of(parent: Path, owner: int) -> list[Path]:
    """The run cgroups created by process `owner` under `parent`."""
    return sorted(parent.glob(f"{_PREFIX}{owner}-*"))


def empty_and_remove(path: Path, wait_s: float = _EMPTY_WAIT_S) -> int:
    """SIGKILL every process in a cgroup until it is empty (they may fork meanwhile), then remove it.

    1 if it was removed, else 0. Blocking: for startup and for the guardian, never inside the event loop.
    """
    deadline = time.monotonic() + wait_s
    while True:
        pids = _pids(path)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        try:
            path.rmdir()
            return 1
        except FileNotFoundError:
            return 1
        except OSError:
            if time.monotonic() > deadline:
                return 0
            time.sleep(0.005 if pids else 0.001)


class RunCgroup:
    """One run's cgroup: its limits, moving the run's first process in, OOM kills, peak usage and removal."""

    def __init__(self, parent: RunParent, memory_bytes: int, max_pids: int) -> None:
        """Create the cgroup with its limits set (raises OSError when the kernel refuses)."""
        self.version = parent.version
        self.memory_bytes = memory_bytes
        self.path = parent.path / f"{_PREFIX}{os.getpid()}-{next(_COUNTER)}-{uuid.uuid4().hex[:8]}"
        self.path.mkdir()
        try:
            if self.version == 2:
                self._write("memory.max", memory_bytes)
                self._write("memory.swap.max", 0, optional=True)
                self._write("memory.oom.group", 1, optional=True)  # one OOM kill takes the whole run
                self._write("pids.max", max_pids, optional=True)
            else:
                self._write("memory.limit_in_bytes", memory_bytes)
                self._write("memory.memsw.limit_in_bytes", memory_bytes, optional=True)  # no swap either
        except OSError:
            with contextlib.suppress(OSError):
                self.path.rmdir()
            raise

    def _write(self, name: str, value: int, *, optional: bool = False) -> None:
        """Write one control file; optional ones may be missing (no swap accounting, no pids controller)."""
        try:
            (self.path / name).write_text(str(value))
        except FileNotFoundError:
            if not optional:
                raise

    def _read(self, name: str) -> str:
        """One control file's text, empty when unreadable."""
        try:
            return (self.path / name).read_text()
        except OSError:
            return ""

    def add(self, pid: int) -> None:
        """Move process `pid` into this cgroup (OSError when the kernel refuses). Blocking: call it from a
        worker thread.

        The kernel waits for an RCU grace period here (some 10 ms on cgroup v1): that is why the run's first
        process is a launcher that waits, moved before it execs anything (see launch.py), and why this never
        runs on the event loop.
        """
        fd = os.open(self.path / "cgroup.procs", os.O_WRONLY)
        try:
            os.write(fd, str(pid).encode())
        finally:
            os.close(fd)

    def oom_kills(self) -> int:
        """How many processes the kernel killed here for exceeding the limit."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        match = re.search(r"^oom_kill (\d+)$", self._read(name), re.M)
        return int(match.group(1)) if match else 0

    def peak_bytes(self) -> int | None:
        """The most memory the run held at once (None when the kernel does not record it)."""
        text = self._read("memory.peak" if self.version == 2 else "memory.max_usage_in_bytes").strip()
        return int(text) if text.isdigit() else None

    def kill(self) -> None:
        """SIGKILL every process in the cgroup."""
        if self.version == 2 and (self.path / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                (self.path / "cgroup.kill").write_text("1")
                return
        for pid in _pids(self.path):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def release(self) -> None:
        """At the end of a run: SIGKILL whatever is still in the cgroup now, and remove the cgroup soon.

        Removal is left to a thread (`REMOVER`): rmdir waits for the cgroup mutex, which a move into another
        cgroup holds through its RCU grace period (a sandbox started ahead, right then: 8 ms median here, more
        than the whole run it follows), and must not block the event loop either. Nothing of the run is alive
        by then (bwrap's pid namespace is gone; strays are killed here); `REMOVER.wait` waits for the
        removals, and a process that dies first leaves them to `sweep_stale` or the guardian.
        """
        if _pids(self.path):
            self.kill()
        REMOVER.put(self.path)


class _Remover:
    """A daemon thread that empties and removes cgroups handed to it, one after the other."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Path] = queue.Queue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def put(self, path: Path) -> None:
        """Remove this cgroup (killing what is in it) as soon as the kernel lets it go."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="sandbox-cgroup-remover", daemon=True)
                self._thread.start()
        self._queue.put(path)

    def wait(self) -> None:
        """Block until every cgroup handed over so far is removed (or given up on). Not on the event loop."""
        self._queue.join()

    def _work(self) -> None:
        while True:
            path = self._queue.get()
            try:
                if not empty_and_remove(path):
                    log.warning("run cgroup %s could not be removed: a process in it does not die", path)
            except Exception:  # the thread must go on with the next one
                log.exception("removing run cgroup %s failed", path)
            finally:
                self._queue.task_done()


REMOVER = _Remover()
