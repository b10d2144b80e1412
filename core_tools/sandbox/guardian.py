"""The sandbox service's guardian: a small process that kills every run still going when the service dies.

Why a process of its own: each run dies with the service through PR_SET_PDEATHSIG (set in the child after
its last credential change) and bwrap's --die-with-parent, but bwrap arms the latter in its sandboxed half
only once that half is set up. A service killed in those first milliseconds took the outer bwrap down with
it and left the half-built sandbox behind, orphaned, running the program to its end (7 kills in 8 at that
moment in tests/deploy/test_service.py, and now and then a kill right after a run started). The guardian needs
no signal to notice: it reads a pipe only the service writes, and the end of that pipe (EOF) is the service's
death, however it died.

Then it SIGKILLs the process group of every run the service had said was live (the outer bwrap leads one,
and the half-built sandbox is still in it until it sets up its own session) and empties every run cgroup
named after the service's pid (everything a run started, wherever cgroups exist).

Protocol on its stdin: `+PID\\n` when a run's first process started, `-PID\\n` when it was reaped.
Entry point: `python -m core_tools.sandbox.guardian --owner PID [--cgroups DIR]`.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

from core_tools.sandbox.cgroup import empty_and_remove, runs_of

_STOP_WAIT_S = 10.0  # on a clean shutdown, how long the guardian gets to notice the closed pipe


class Guardian:
    """The service's side: starts the guardian process and tells it which runs are live."""

    def __init__(self, owner: int, cgroups: Path | None) -> None:
        """Start the guardian for process `owner` (this one), whose run cgroups live under `cgroups`."""
        root = Path(__file__).resolve().parents[2]  # so that `-m core_tools...` imports from anywhere
        argv = [sys.executable, "-m", "core_tools.sandbox.guardian", "--owner", str(owner)]
        if cgroups is not None:
            argv += ["--cgroups", str(cgroups)]
        # Its own session: a Ctrl-C meant for the service must not take the guardian down first.
        # No environment of the service's (a token may be there): it needs only the import path.
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            close_fds=True,
            start_new_session=True,
            cwd="/",
            env={"PYTHONPATH": str(root)},
        )
        assert self.proc.stdin is not None
        self._fd = self.proc.stdin.fileno()
        os.set_blocking(self._fd, False)  # never stall the event loop on a guardian that stopped reading

    @property
    def pid(self) -> int:
        """The guardian's pid."""
        return self.proc.pid

    def started(self, pid: int) -> None:
        """A run's first process (leader of its own process group) was started."""
        self._send(f"+{pid}\n")

    def finished(self, pid: int) -> None:
        """That run's process was reaped."""
        self._send(f"-{pid}\n")

    def _send(self, line: str) -> None:
        # A lost line costs only the guardian's help for that run: PDEATHSIG still holds.
        with contextlib.suppress(OSError):
            os.write(self._fd, line.encode())

    def close(self) -> None:
        """On a clean shutdown (every run already stopped): close the pipe and wait for the guardian."""
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        try:
            self.proc.wait(_STOP_WAIT_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def watch(owner: int, cgroups: Path | None) -> tuple[int, int]:
    """Follow the run list on stdin until EOF, then kill what is left: (process groups, cgroups) killed."""
    live: set[int] = set()
    for raw in sys.stdin.buffer:
        text = raw.strip().decode("ascii", errors="replace")
        if text[:1] in ("+", "-") and text[1:].isdigit():
            (live.add if text[0] == "+" else live.discard)(int(text[1:]))
    groups = 0
    for pid in sorted(live):
        try:
            os.killpg(pid, signal.SIGKILL)
            groups += 1
        except OSError:
            pass  # already gone with the service, as it should be
    emptied = 0
    if cgroups is not None:
        for path in runs_of(cgroups, owner):
            emptied += empty_and_remove(path)
    return groups, emptied


def main(argv: list[str] | None = None) -> int:
    """Entry point of the guardian process."""
    parser = argparse.ArgumentParser(prog="python -m core_tools.sandbox.guardian")
    parser.add_argument("--owner", type=int, required=True, help="pid of the sandbox service")
    parser.add_argument("--cgroups", type=Path, default=None, help="where the service's run cgroups live")
    args = parser.parse_args(argv)
    groups, emptied = watch(args.owner, args.cgroups)
    if groups or emptied:
        print(
            f"sandbox guardian: the sandbox service (pid {args.owner}) is gone with runs still going; "
            f"killed {groups} run process groups and emptied {emptied} run cgroups",
            file=sys.stderr,
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
