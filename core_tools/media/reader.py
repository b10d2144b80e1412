"""A file's text read in a worker process held to limits of time, memory and output, never in the bot.

A crafted file (a zip bomb, a PDF whose pages share one huge text stream, a CSV that sends a regular
expression backtracking) costs the worker its limits, not the bot its memory or event loop: the worker
(core_tools.media.worker) runs under RLIMIT_AS and RLIMIT_CPU, is killed at a wall-clock deadline, and its
answer is read up to a bound. At most `concurrency` files are read at once.

Once a file has been read, the next worker is started ahead (`ReadLimits.ahead`): it loads its parsers while
nothing waits and gets the next file's parameters on stdin, which saves that file the worker's start (about
half a second for a PDF). A bot that is never sent a file never starts one.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import signal
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core_tools.errors import MediaError
from core_tools.media.extract import MAX_TEXT_CHARS, Extracted
from core_tools.media.worker import MEMORY_EXIT

log = logging.getLogger(__name__)

WORKER = (sys.executable, "-m", "core_tools.media.worker")
_PROJECT = Path(__file__).resolve().parents[2]  # where `core_tools` is importable from
_STDERR_KEPT = 4096  # the end of a crashed worker's traceback, for the log


@dataclass(frozen=True)
class ReadLimits:
    """What reading one file may take (FILE_READ_TIMEOUT_S, FILE_READ_MEMORY_MB, FILE_MAX_TEXT_CHARS)."""

    timeout_s: float = 60.0
    memory_mb: int = 512
    max_chars: int = MAX_TEXT_CHARS
    concurrency: int = 2  # workers at once: the memory they may take is at most this many times memory_mb
    worker: tuple[str, ...] = WORKER  # the command that starts a worker (its JSON argument follows)
    ahead: bool = True  # keep one worker started ahead for the next file

    @property
    def max_unpacked(self) -> int:
        """The most a DOCX may unpack to: a quarter of the memory (its XML parsed takes several times it)."""
        return self.memory_mb * 1024 * 1024 // 4


class _TooMuch(Exception):
    """The worker wrote more than its answer can be."""


class FileReader:
    """Reads files' text through workers; MediaError (safe to show) says why a file could not be read."""

    def __init__(self, limits: ReadLimits) -> None:
        self.limits = limits
        self._slots = asyncio.Semaphore(max(1, limits.concurrency))
        self._spare: asyncio.subprocess.Process | None = None
        self._starting = False
        self._spare_loop: asyncio.AbstractEventLoop | None = None

    async def aclose(self) -> None:
        """Stop the worker started ahead, if any."""
        spare, self._spare = self._spare, None
        if spare is not None and spare.returncode is None:
            if self._spare_loop is asyncio.get_running_loop():
                spare.kill()
                await spare.wait()
            else:  # started by a loop that is gone: its end of the pipe closed, it exits by itself
                with contextlib.suppress(ProcessLookupError):
                    os.kill(spare.pid, signal.SIGKILL)

    async def read(self, path: Path, name: str, mime_type: str | None) -> Extracted:
        """The text of the stored file at `path` (sent as `name`), within the limits."""
        async with self._slots:
            return await self._run(path, name, mime_type)

    async def _run(self, path: Path, name: str, mime_type: str | None) -> Extracted:
        limits = self.limits
        params = {
            "path": str(path),
            "name": name,
            "mime": mime_type,
            "max_chars": limits.max_chars,
            "max_unpacked": limits.max_unpacked,
            "memory_bytes": limits.memory_mb * 1024 * 1024,
            "cpu_s": max(1, math.ceil(limits.timeout_s)),
        }
        proc = await self._handed(params)
        if proc is None:
            proc = await _start(limits.worker, json.dumps(params))
        if limits.ahead and self._spare is None and not self._starting:
            # The next file's worker starts now, loading its parsers while this file is read: one at most.
            self._starting = True
            try:
                self._spare = await _start(limits.worker)
                self._spare_loop = asyncio.get_running_loop()
            except OSError as exc:  # no process to spare (a process limit): the next file starts its own
                log.warning("could not start a file reader ahead: %s", exc)
            finally:
                self._starting = False
        # The answer: the text (at most 4 bytes a character in UTF-8, 6 when JSON escapes it) and a margin.
        bound = limits.max_chars * 6 + 1024 * 1024
        try:
            out, err = await asyncio.wait_for(self._collect(proc, bound), limits.timeout_s)
        except TimeoutError:
            log.warning("reading %r took longer than %s s: the worker is stopped", name, limits.timeout_s)
            raise MediaError(
                f"it could not be read: reading it took longer than {limits.timeout_s:g} s "
                "(FILE_READ_TIMEOUT_S)"
            ) from None
        except _TooMuch:
            log.warning("the worker reading %r wrote more than %d bytes: stopped", name, bound)
            raise MediaError("it could not be read: the reader gave more text than it may") from None
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
        return self._answer(proc.returncode, out, err, name)

    async def _handed(self, params: dict[str, Any]) -> asyncio.subprocess.Process | None:
        """The worker started ahead, given this file's parameters; None when there is none (or it died)."""
        proc, self._spare = self._spare, None
        if proc is None:
            return None
        assert proc.stdin is not None
        if self._spare_loop is not asyncio.get_running_loop():  # started by a loop that is gone
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGKILL)
            return None
        try:
            if proc.returncode is not None:
                raise ConnectionResetError
            proc.stdin.write(json.dumps(params).encode() + b"\n")
            await proc.stdin.drain()
            proc.stdin.close()
        except (ConnectionResetError, BrokenPipeError):
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
            return None
        return proc

    async def _collect(self, proc: asyncio.subprocess.Process, bound: int) -> tuple[bytes, bytes]:
        assert proc.stdout is not None and proc.stderr is not None
        out, err = await asyncio.gather(_drain(proc.stdout, bound), _drain(proc.stderr, None))
        await proc.wait()
        return out, err

    def _answer(self, code: int | None, out: bytes, err: bytes, name: str) -> Extracted:
        limits = self.limits
        if code == MEMORY_EXIT:
            log.warning("reading %r needed more than %d MB: the worker stopped", name, limits.memory_mb)
            raise MediaError(
                f"it could not be read: reading it needs more than {limits.memory_mb} MB of memory "
                "(FILE_READ_MEMORY_MB)"
            )
        if code in (-signal.SIGXCPU, -signal.SIGKILL):
            log.warning("reading %r was stopped by the CPU limit (signal %s)", name, -(code or 0))
            raise MediaError(
                f"it could not be read: reading it took more than {limits.timeout_s:g} s of processing "
                "(FILE_READ_TIMEOUT_S)"
            )
        try:
            answer = json.loads(out) if code == 0 else None
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            log.warning(
                "the worker reading %r failed (exit %s): %s",
                name,
                code,
                err[-_STDERR_KEPT:].decode("utf-8", "replace"),
            )
            raise MediaError("it could not be read: the reader failed on it (it may be damaged)")
        if "error" in answer:
            raise MediaError(str(answer["error"]))
        return Extracted(str(answer["kind"]), str(answer["text"]), str(answer["outline"]))


async def _start(worker: tuple[str, ...], params: str | None = None) -> asyncio.subprocess.Process:
    """A worker process: given its file's parameters as its argument, or (None) started ahead, waiting for
    them on stdin."""
    # Only what Python needs: the bot's secrets stay out of a process that parses untrusted files.
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(_PROJECT),
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONIOENCODING": "utf-8",
    }
    return await asyncio.create_subprocess_exec(
        *worker,
        *([] if params is None else [params]),
        stdin=asyncio.subprocess.DEVNULL if params is not None else asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
    )


async def _drain(stream: asyncio.StreamReader, bound: int | None) -> bytes:
    """All of a pipe; with `bound`, _TooMuch past it; without, only its last bytes are kept."""
    kept = bytearray()
    while chunk := await stream.read(65536):
        kept += chunk
        if bound is None:
            del kept[:-_STDERR_KEPT]
        elif len(kept) > bound:
            raise _TooMuch
    return bytes(kept)
