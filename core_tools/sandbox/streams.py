"""A run's output streams: read to the end while keeping at most a cap, and the latest line for progress."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from dataclasses import dataclass, field

from core_tools.sandbox.model import OutputWatcher

_CHUNK = 65_536
_TAIL_BYTES = 16_384  # end of stderr kept (beyond the cap) only to categorize the error
_LINE_BYTES = 4096  # the end of an unfinished line kept to find the latest complete one (progress)
_LINE_BREAK = re.compile(rb"[\r\n]")  # \r too: progress bars redraw their line with it


@dataclass
class Capture:
    """One output stream: the first `cap` bytes, a short tail, and the total size."""

    cap: int
    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    total: int = 0

    def feed(self, chunk: bytes) -> None:
        """Keep what fits under the cap, count everything."""
        self.total += len(chunk)
        room = self.cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
        self.tail += chunk
        if len(self.tail) > _TAIL_BYTES:
            del self.tail[:-_TAIL_BYTES]

    @property
    def truncated(self) -> bool:
        """Whether more was produced than kept."""
        return self.total > len(self.head)

    def text(self) -> str:
        """The kept bytes as text."""
        return self.head.decode("utf-8", errors="replace")

    def text_for_diagnosis(self) -> str:
        """Head and (if cut) tail: error names sit near the top (node) or at the very end (python)."""
        if not self.truncated:
            return self.text()
        return self.text() + "\n" + self.tail.decode("utf-8", errors="replace")


class LineWatch:
    """Finds the latest complete, non-blank line of one stream and tells `report` (progress of a run)."""

    def __init__(self, report: OutputWatcher) -> None:
        self.report = report
        self.partial = b""  # the end of the line not finished yet, at most _LINE_BYTES

    def feed(self, chunk: bytes) -> None:
        """Look at a chunk: report its last complete line, if it finished one (once per chunk)."""
        data = self.partial + chunk
        end = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if end < 0:
            self.partial = data[-_LINE_BYTES:]
            return
        self.partial = data[end + 1 :][-_LINE_BYTES:]
        lines = [line for line in _LINE_BREAK.split(data[max(0, end - _LINE_BYTES) : end]) if line.strip()]
        if lines:
            self.report(lines[-1].decode("utf-8", errors="replace"))


async def pump(stream: asyncio.StreamReader | None, capture: Capture, watch: LineWatch | None = None) -> None:
    """Read a stream to EOF, keeping at most the cap in memory (and showing `watch` every chunk)."""
    if stream is None:
        return
    while chunk := await stream.read(_CHUNK):
        capture.feed(chunk)
        if watch is not None:
            watch.feed(chunk)


async def pump_fd(pipe: list[int], capture: Capture) -> None:
    """Read the read end `pipe[0]` to EOF into `capture`; the fd is closed (and marked -1) afterwards."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    handle = os.fdopen(pipe[0], "rb", buffering=0)
    pipe[0] = -1  # the file object (and the transport) own it now
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), handle)
    try:
        await pump(reader, capture)
    finally:
        transport.close()


async def feed_stdin(stdin: asyncio.StreamWriter | None, data: bytes) -> None:
    """Write the program to the interpreter's stdin and close it."""
    if stdin is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stdin.write(data)
        await stdin.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stdin.close()
        await stdin.wait_closed()
