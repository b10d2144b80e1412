"""The sandbox service's wire protocol: JSON lines, each maybe followed by raw file frames.

Version 2, one request per connection (unix socket or TCP):

- A message is one JSON object on one line (UTF-8, ending in "\\n"). A message that declares files
  (`files_in` of a run, `files_out` of its result) as `[{"name": "data.csv", "size": 1234}, ...]` is followed
  at once by the raw bytes of each file in that order, exactly `size` bytes each: files never inflate a
  line, and they have limits of their own.
- A service started with a token (`CODE_SANDBOX_TOKEN`; required on TCP) reads at most `PREAUTH_MAX_BYTES`
  of a connection, for at most its pre-auth timeout, before the token is checked: the first line is either
  `{"op": "auth", "token": "..."}` (answered `{"ok": true, "op": "auth"}`; the request follows) or a small
  request carrying the token itself. Anything else gets kind `unauthorized` and the connection is closed.
- `{"op": "hello"}` -> `{"ok": true, "protocol": 2, "isolation": "bwrap", "languages": ["python"], "describe":
  "...", "default_timeout_s": 30, "max_timeout_s": 120, "limits": {"timeout_s": 30, "max_timeout_s": 120,
  "memory_mb": 512, "network": false, ...every field of SandboxLimits}, "queue_timeout_s": 60,
  "max_concurrent": 8, "max_request_bytes": 1048576, "max_files_in_bytes": 33554432, "max_files_in": 100,
  ...counters}`. The service's limits are the ones every run gets, whatever a client was configured with: a
  client describes those to its users and sizes its waits by them (`limits` is missing from older services).
- `{"op": "run", "code": "...", "language": "python", "timeout_s": 5, "files_in": [...], "files_out":
  {"max_files": 10, "max_bytes": 10485760}}` (`timeout_s` may be null; the files in follow the line) ->
  `{"ok": true, "result": {...every field of ExecutionResult, "files_out": [{"name", "size"}...]}}` and the
  bytes of those files.
- With `"ack": true` in a run request, the service first sends `{"started": true}` on its own line when the
  run has its slot and files and the code is about to start. A client whose connection fails before that
  line knows the code never ran and may send it to another service.
- With `"progress": true` as well, the service sends `{"output": "<line>"}` lines between those two: the
  latest complete line of the run's output, at most one a second and only when it changed, cut to
  `MAX_OUTPUT_LINE_CHARS` (for the chat's status line). A client skips interim lines (without `"ok"`) it
  does not know, so later versions may add others.
- Any failure -> `{"ok": false, "kind": KIND, "error": "one readable line"}` where KIND is `bad_request`,
  `too_large`, `tool_error` (unknown language, bad timeout: the same errors a LocalExecutor raises),
  `busy` (no free slot in time, too many waiting, or too many connections), `unauthorized` or `internal`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import PurePosixPath
from typing import Any

PROTOCOL_VERSION = 2
MAX_REQUEST_BYTES = 1_048_576  # one request line, JSON included: about 1 MB of code at most
MAX_ANSWER_BYTES = 16 * 1_048_576  # a result holds capped output, but JSON escapes can inflate it
PREAUTH_MAX_BYTES = 4096  # what a token service reads of a connection before the token is checked
MAX_FILES_IN = 100  # files declared in one run request
READ_CHUNK = 65_536  # the stream readers' buffer: what one connection may hold beyond what it parsed
MAX_OUTPUT_LINE_CHARS = 1000  # a progress line of output, as sent to the client


class LineTooLong(Exception):
    """A line went past its limit before its newline."""


def encode(message: dict[str, Any]) -> bytes:
    """One protocol line."""
    return json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n"


def failure(kind: str, error: str) -> dict[str, Any]:
    """A failure answer."""
    return {"ok": False, "kind": kind, "error": error}


def decode(line: bytes) -> dict[str, Any]:
    """Parse one line; ValueError (with a readable reason) when it is not a JSON object."""
    try:
        message = json.loads(line)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not valid JSON: {exc}") from None
    except RecursionError:  # the stdlib parser recurses once per nested array or object
        raise ValueError("the JSON is nested too deeply") from None
    if not isinstance(message, dict):
        raise ValueError("not a JSON object")
    return message


async def read_line(reader: asyncio.StreamReader, max_bytes: int, timeout_s: float) -> bytes:
    """One line (newline included) of at most `max_bytes`, all of it within `timeout_s`.

    LineTooLong as soon as more than `max_bytes` came without a newline (what was read stays bounded by the
    reader's own buffer limit); IncompleteReadError at end of stream; TimeoutError.
    """
    parts: list[bytes] = []
    size = 0
    async with asyncio.timeout(timeout_s):
        while True:
            try:
                chunk = await reader.readuntil(b"\n")
                done = True
            except asyncio.LimitOverrunError as exc:  # no newline within the reader's buffer: take it all
                chunk = await reader.readexactly(exc.consumed)
                done = False
            size += len(chunk)
            if size > max_bytes:
                raise LineTooLong(f"more than {max_bytes} bytes without a newline")
            parts.append(chunk)
            if done:
                return b"".join(parts)


async def read_frame(reader: asyncio.StreamReader, size: int, idle_s: float, *, keep: bool = True) -> bytes:
    """Exactly `size` raw bytes (a file after its line); each chunk must come within `idle_s`.

    `keep=False` reads and drops them (a refused request's files, so that its answer reaches the client).
    """
    buffer = bytearray()
    left = size
    while left > 0:
        chunk = await asyncio.wait_for(reader.read(min(READ_CHUNK, left)), idle_s)
        if not chunk:
            raise asyncio.IncompleteReadError(bytes(buffer), size)
        left -= len(chunk)
        if keep:
            buffer += chunk
    return bytes(buffer)


async def write_frames(writer: asyncio.StreamWriter, files: Sequence[bytes]) -> None:
    """The raw bytes of each declared file, in order."""
    for data in files:
        writer.write(data)
        await writer.drain()


def declared_files(raw: object, *, max_files: int, max_bytes: int, max_total: int) -> list[tuple[str, int]]:
    """A message's `[{"name", "size"}...]`, checked: plain, distinct file names and sizes within the limits.

    TypeError when the list is malformed, ValueError when it is over a limit (each with a readable reason).
    """
    if not isinstance(raw, list):
        raise TypeError("files must be a list of {name, size}")
    if len(raw) > max_files:
        raise ValueError(f"{len(raw)} files, over the limit of {max_files}")
    out: list[tuple[str, int]] = []
    seen: set[str] = set()
    for item in raw:
        if not isinstance(item, dict):
            raise TypeError("each file must be an object with name and size")
        name, size = item.get("name"), item.get("size")
        if not isinstance(name, str) or not is_plain_name(name) or name in seen:
            raise TypeError(f"bad or repeated file name {str(name)[:80]!r}")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise TypeError(f"bad size for {name!r}")
        if size > max_bytes:
            raise ValueError(f"{name}: {size} bytes, over the limit of {max_bytes}")
        seen.add(name)
        out.append((name, size))
    total = sum(size for _name, size in out)
    if total > max_total:
        raise ValueError(f"{total} bytes of files, over the limit of {max_total}")
    return out


def is_plain_name(name: str) -> bool:
    """A file name with no directory part, usable as is under in/ or out/."""
    return (
        0 < len(name) <= 255
        and "\0" not in name
        and "/" not in name
        and name not in (".", "..")
        and PurePosixPath(name).name == name
    )


def parse_address(address: str) -> tuple[str, int] | str:
    """`tcp://host:port` -> (host, port); `unix:///path` or a plain path -> the socket path."""
    if address.startswith("tcp://"):
        host, sep, port = address[len("tcp://") :].rstrip("/").rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"a sandbox service address must be tcp://host:port, not {address!r}")
        return host.strip("[]"), int(port)
    if address.startswith("unix://"):
        return address[len("unix://") :]
    return address
