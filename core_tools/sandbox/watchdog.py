"""The memory bound when no cgroup can be made: sample a run from the host and kill it over the limit.

Used in a container with a read-only /sys/fs/cgroup or as a user without cgroup delegation. Every sample
adds up, for every process of the run (bwrap and all its descendants, daemons included: they stay under
the pid namespace's init), its private memory (RssAnon) and mapped shared memory (RssShmem), plus what
the run's own tmpfs mounts hold (/scratch, /tmp, /dev/shm, read through /proc/<pid>/root). Shared memory
mapped from those tmpfs counts twice, which only errs towards killing sooner.

Sampling bounds the overshoot by what the run can allocate between two samples, so the interval shrinks
as the run nears its limit; RLIMIT_AS still caps each process. The sampler is a thread of its own that
kills the run itself: a busy event loop must not delay the kill. What it cannot see: SysV shm segments and
memfds that no process maps any more (each memfd is also capped by RLIMIT_FSIZE, and their number by
RLIMIT_NOFILE). A cgroup sees everything; this is the fallback.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading

SLOW_INTERVAL_S = 0.05  # below half the limit
FAST_INTERVAL_S = 0.005  # at or above half the limit: two cores fault in some 20-40 MB in 5 ms
TMPFS_MOUNTS = ("scratch", "tmp", "dev/shm")


def _children(pid: int) -> list[int]:
    """Children of every thread of `pid` (a thread that forks is the parent, not the main thread)."""
    found: list[int] = []
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
                found += [int(p) for p in handle.read().split()]
    return found


def process_tree(root: int) -> list[int]:
    """`root` and all its descendants, as seen right now."""
    seen, todo = [], [root]
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.append(pid)
        todo += _children(pid)
    return seen


def _process_bytes(pid: int) -> int:
    """Private plus mapped shared memory of one process, 0 once it is gone."""
    total = 0
    with contextlib.suppress(OSError), open(f"/proc/{pid}/status", "rb") as handle:
        for line in handle:
            if line.startswith((b"RssAnon:", b"RssShmem:")):
                total += int(line.split()[1]) * 1024
    return total


def _tmpfs_bytes(pid: int) -> int:
    """Bytes held by the run's own tmpfs mounts, seen through the root of one of its processes."""
    total = 0
    try:
        root, host = os.stat(f"/proc/{pid}/root/"), os.stat("/")
    except OSError:
        return 0
    if (root.st_dev, root.st_ino) == (host.st_dev, host.st_ino):
        return 0  # bwrap has not switched to the sandbox's root yet: these would be the host's dirs
    for mount in TMPFS_MOUNTS:
        with contextlib.suppress(OSError):
            st = os.statvfs(f"/proc/{pid}/root/{mount}")
            total += (st.f_blocks - st.f_bfree) * st.f_frsize
    return total


def run_bytes(root: int, sandboxed: bool) -> int:
    """Memory held on the host by the run rooted at `root` (bwrap, or the interpreter when unsandboxed)."""
    tree = process_tree(root)
    total = sum(_process_bytes(pid) for pid in tree)
    # bwrap itself stays in the host's mount namespace; its child (the sandbox's init) sees the tmpfs.
    inside = [pid for pid in tree if pid != root]
    if sandboxed and inside:
        total += _tmpfs_bytes(inside[0])
    return total


def interval(used: int, limit: int) -> float:
    """Seconds until the next sample: short when the run is close to its limit."""
    return FAST_INTERVAL_S if used * 2 >= limit else SLOW_INTERVAL_S


class Watchdog:
    """A thread that samples one run and SIGKILLs all of it once it holds more than `limit` bytes."""

    def __init__(self, root: int, sandboxed: bool, limit: int) -> None:
        """Start sampling the run whose outermost process is `root`."""
        self.root, self.sandboxed, self.limit = root, sandboxed, limit
        self.exceeded = False
        self.peak = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"sandbox-watchdog-{root}", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        """Sample until stopped or over the limit; over it, kill every process of the run."""
        while not self._done.is_set():
            used = run_bytes(self.root, self.sandboxed)
            self.peak = max(self.peak, used)
            if used > self.limit:
                self.exceeded = True
                self._kill()
                return
            self._done.wait(interval(used, self.limit))

    def _kill(self) -> None:
        """SIGKILL the run. In a sandbox bwrap itself is spared: it reaps its namespace and then exits."""
        tree = process_tree(self.root)
        for pid in tree if not self.sandboxed else tree[1:]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def stop(self) -> None:
        """Stop sampling and wait for the thread (it finishes its current sample first)."""
        self._done.set()
        self._thread.join()
