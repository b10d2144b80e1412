"""The health file (HEALTH_FILE): the running process rewrites it at every watchdog tick: first line `ok` or
`unhealthy: <reason>`, then a line naming the process, then `pid N`; its mtime is the heartbeat. The
container's health check reads it at every probe (deploy/healthcheck --file: it stops a process stuck for
long) and `python -m bot doctor --quick` reads it too: missing, stale (an event loop that is stuck) or
unhealthy is a failure."""

from __future__ import annotations

import contextlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

STALE_TICKS = 3  # a file older than this many ticks (plus the margin) was left by a stuck or dead process
STALE_MARGIN_S = 5.0


def stale_after_s(tick_s: float) -> float:
    """How old the health file may be before it counts as stale."""
    return STALE_TICKS * tick_s + STALE_MARGIN_S


def write_health(path: Path, lines: list[str]) -> None:
    """Replace the file at once (a reader never sees half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@dataclass(frozen=True)
class Judged:
    """What the health file says: healthy or not, and a line about it."""

    ok: bool
    detail: str


def judge(first_line: str | None, age_s: float | None, stale_s: float) -> Judged:
    """The health file's verdict from its first line and age (None: there is no file)."""
    if first_line is None or age_s is None:
        return Judged(False, "no health file: the bot is not running (or has not started yet)")
    if age_s > stale_s:
        return Judged(
            False,
            f"the health file was last written {age_s:.0f} s ago (limit {stale_s:.0f} s): the bot's event "
            "loop is stuck, or it stopped",
        )
    line = first_line.strip()
    if line == "ok":
        return Judged(True, f"healthy (written {age_s:.0f} s ago)")
    if line.startswith("unhealthy"):
        return Judged(False, line)
    return Judged(False, f"the health file says {line[:200]!r}, not ok")


def read_health(path: Path, now: float) -> tuple[str | None, float | None]:
    """The health file's first line and age at wall-clock `now` (None, None when there is none)."""
    try:
        age = now - path.stat().st_mtime
        with path.open(encoding="utf-8", errors="replace") as f:
            first = f.readline()
    except OSError:
        return None, None
    return first, max(0.0, age)
