"""Value types of the code sandbox: isolation levels, limits, results and the `Executor` seam."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

from core_tools.types import OutputFile


class Isolation(StrEnum):
    """How strongly code is isolated from the bot: a bwrap sandbox, a plain subprocess, or not at all."""

    BWRAP = "bwrap"
    UNSANDBOXED = "unsandboxed"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class SandboxLimits:
    """Resource caps of one execution; every run gets its own fresh set."""

    timeout_s: float = 30.0  # default wall clock per call
    max_timeout_s: float = 120.0  # a per-call timeout is clamped to this
    cpu_s: int = 60  # RLIMIT_CPU, per process
    # The whole run (all its processes and every tmpfs it writes): a cgroup per run, else the watchdog.
    # Each process also gets RLIMIT_AS of this (node: plus room for V8's reservations, heap capped to it).
    memory_mb: int = 512
    max_processes: int = 64  # RLIMIT_NPROC inside the sandbox's own user namespace (threads count too)
    file_size_mb: int = 16  # RLIMIT_FSIZE: largest single file the code may write
    open_files: int = 64  # RLIMIT_NOFILE
    scratch_mb: int = 64  # size of each tmpfs: the working dir, the private /tmp and /dev/shm
    # Kept per stream (and in the execution log, readable whole by read_result); the rest is counted only.
    output_cap_bytes: int = 1_000_000
    network: bool = False


@dataclass(frozen=True)
class ExecutionResult:
    """The outcome of one run; JSON-serialisable with `dataclasses.asdict`."""

    success: bool
    stdout: str
    stderr: str
    exit_code: int | None  # None when the run was killed on timeout or never started
    duration_ms: int
    error_category: str | None  # syntax, import, type, reference, timeout, network, memory, runtime, ...
    truncated: bool  # True when either stream produced more than the cap
    stdout_bytes: int  # bytes produced in total, even beyond the cap
    stderr_bytes: int
    isolation: str
    language: str
    timed_out: bool
    # Files the run wrote under out/ (when asked for), within the count and size limits; and what was not
    # taken (over a limit), as "name: why".
    files_out: tuple[OutputFile, ...] = ()
    files_skipped: tuple[str, ...] = ()
    # The user's files that were not put under in/ (over a sandbox service's limits), as "name: why".
    files_in_skipped: tuple[str, ...] = ()


@dataclass(frozen=True)
class FileLimits:
    """How many files a run may hand back from out/, and how big each may be."""

    max_files: int = 10
    max_bytes: int = 10 * 1024 * 1024


# Told the latest complete line of a run's output while it goes on (raw, possibly long: callers bound it).
OutputWatcher = Callable[[str], None]


class Executor(Protocol):
    """Runs untrusted code: the seam of the local executor, a sandbox service's client and a pool of them."""

    isolation: Isolation

    @property
    def limits(self) -> SandboxLimits | None:
        """The limits every run gets (a sandbox service's own), or None while they are not known."""
        ...

    async def run(
        self,
        code: str,
        language: str = "python",
        timeout_s: float | None = None,
        *,
        files_in: Mapping[str, bytes] | None = None,
        files_out: FileLimits | None = None,
        on_output: OutputWatcher | None = None,
    ) -> ExecutionResult:
        """Run `code` in `language` and return what happened (never raises for failures of the code).

        `files_in` appear read-only under in/ of the working directory; with `files_out`, the files the
        run wrote under out/ come back in the result. `on_output` is told the latest complete line the
        run printed (stdout or stderr) while it goes on, for progress; an executor may never call it.
        """
        ...

    def languages(self) -> list[str]:
        """The languages this executor can run right now."""
        ...


class RunWatcher(Protocol):
    """Something that must know which runs are live (to kill them if this process dies)."""

    def started(self, pid: int) -> None:
        """A run's first process (the leader of its own process group) was started."""

    def finished(self, pid: int) -> None:
        """That run's process was reaped."""
