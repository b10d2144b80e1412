"""The backup's work in a process of its own, at low CPU and I/O priority, so the bot's turns keep their
speed while it runs (bench/bench_backup.py): the bot only waits for it, off its event loop."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import os
import platform
import signal
import sys
from pathlib import Path
from typing import Any

from core_tools.backup.manifest import BackupError

NICE = 19  # the lowest CPU priority: the bot's turns come first (bench/bench_backup.py)
# ioprio_set(2): best-effort class, lowest level (7). The idle class could starve a backup forever on a
# busy disk; best-effort 7 yields to every other best-effort process of normal level.
IOPRIO_CLASS_BE = 2
IOPRIO_LOWEST = 7
SYS_IOPRIO_SET = {"x86_64": 251, "aarch64": 30}
PR_SET_PDEATHSIG = 1
REPO = Path(__file__).resolve().parents[2]


def lower_priority() -> None:
    """Lower this process's CPU and I/O priority; end it when its parent (the bot) dies."""
    with contextlib.suppress(OSError):
        os.nice(NICE)
    number = SYS_IOPRIO_SET.get(platform.machine())
    if number is None or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall(number, 1, 0, (IOPRIO_CLASS_BE << 13) | IOPRIO_LOWEST)  # IOPRIO_WHO_PROCESS, this one
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


async def run_worker(action: str, payload: dict[str, Any]) -> dict[str, Any]:
    """Run `python -m core_tools.backup ACTION` with `payload` (JSON on stdin: the database URL stays out
    of the process list); its JSON result, or BackupError with its one-line reason."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "core_tools.backup",
        action,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=os.getcwd(),
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        },
    )
    try:
        out, err = await proc.communicate(json.dumps(payload).encode())
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()  # the bot stops: the unfinished backup is never listed, and the next run cleans it
        await proc.wait()
        raise
    lines = out.decode(errors="replace").strip().splitlines()
    if proc.returncode == 0 and lines:
        result: dict[str, Any] = json.loads(lines[-1])
        return result
    reason = err.decode(errors="replace").strip().splitlines()
    raise BackupError(reason[-1] if reason else f"the backup process ended with code {proc.returncode}")
