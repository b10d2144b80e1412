"""What a code run shows while and after it runs: its output bounded for the model, and the turn's status
line (elapsed time and last line of output) renewed while a long run goes on."""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from core_tools.sandbox import ExecutionResult
from core_tools.types import ToolContext

log = logging.getLogger(__name__)

_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")  # terminal colours and cursor moves in a line of output

PROGRESS_AFTER_S = 3.0  # a run that lasts longer shows its elapsed time (and last output) in the status
PROGRESS_EVERY_S = 1.0  # how often that status is renewed (the chat's edit throttle still applies)
PROGRESS_LINE_CHARS = 80  # the most of a line of output the status shows


def bounded(text: str, limit: int) -> str:
    """Head and tail of `text` within `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    head, tail = int(limit * 0.6), int(limit * 0.4)
    cut = len(text) - head - tail
    note = f"[... {cut} characters cut: read the whole output with read_result(handle=<execution_id>) ...]"
    return f"{text[:head]}\n{note}\n{text[-tail:]}"


def elapsed_text(seconds: float) -> str:
    """`7 s`, `2 min 05 s`: how long something has been running."""
    whole = int(seconds)
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60:02d} s"


def output_line(raw: str, limit: int = PROGRESS_LINE_CHARS) -> str:
    """A line of a run's output fit for a status line: printable characters only, one line, bounded."""
    text = _ANSI.sub("", raw)
    # isprintable() is False for control, format (bidi overrides, zero-width) and separator characters.
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def progress_status(label: str, seconds: float, last_line: str | None) -> str:
    """The status of a long run: what runs, for how long, and the last line it printed (if any).

    The time moves in steps that grow (1 s, then 5 s after 10 s, 15 s after a minute): a quiet run's status
    changes, and so is edited, less often the longer it runs (groups allow a bot about 20 messages a minute).
    """
    whole = int(seconds)
    step = 1 if whole < 10 else 5 if whole < 60 else 15
    line = output_line(last_line) if last_line else ""
    status = f"{label} {elapsed_text(whole - whole % step)}"
    return f"{status}, last output: {line}" if line else status


@dataclass
class LastLine:
    """The latest complete line a run printed, as its executor reports it while it goes on."""

    line: str | None = None

    def see(self, line: str) -> None:
        """Called by the executor for each new latest line."""
        self.line = line


async def showing_progress(
    ctx: ToolContext, label: str, run: Coroutine[Any, Any, ExecutionResult], output: LastLine
) -> ExecutionResult:
    """Await a run; past PROGRESS_AFTER_S renew the turn's status every PROGRESS_EVERY_S with the elapsed
    time and the last line of output. A cancelled caller (a stopped turn) cancels the run."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    task = asyncio.ensure_future(run)
    shown = label
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=PROGRESS_EVERY_S)
            if done:
                return task.result()
            seconds = loop.time() - started
            status = progress_status(label, seconds, output.line)
            if seconds < PROGRESS_AFTER_S or status == shown:
                continue
            shown = status
            try:
                await ctx.progress(status)
            except Exception:  # progress is a courtesy: it must never fail the run
                log.debug("progress callback failed", exc_info=True)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task})
