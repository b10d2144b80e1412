"""The bot's side of the sandbox service: `ServiceExecutor`, an `Executor` that sends each run to a service
over its unix socket or TCP (protocol.py says how)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core_tools.errors import ToolError
from core_tools.sandbox.limits import OwnLimit, disagreements, limits_from
from core_tools.sandbox.model import ExecutionResult, FileLimits, Isolation, OutputWatcher, SandboxLimits
from core_tools.sandbox.protocol import (
    MAX_ANSWER_BYTES,
    MAX_FILES_IN,
    PROTOCOL_VERSION,
    READ_CHUNK,
    LineTooLong,
    declared_files,
    decode,
    encode,
    is_plain_name,
    parse_address,
    read_frame,
    read_line,
    write_frames,
)
from core_tools.sandbox.workfiles import human_size
from core_tools.types import OutputFile

log = logging.getLogger(__name__)

_INFO_RETRY_S = 5.0  # after a failed hello, synchronous callers do not retry before this


@dataclass(frozen=True)
class ServiceInfo:
    """What a service said in its hello."""

    isolation: Isolation
    languages: list[str]
    describe: str
    default_timeout_s: float
    max_timeout_s: float
    queue_timeout_s: float
    max_request_bytes: int
    max_files_in_bytes: int
    max_files_in: int
    limits: SandboxLimits | None = None  # what every run there gets (None: an older service did not say)

    @classmethod
    def from_hello(cls, answer: dict[str, Any]) -> ServiceInfo:
        """Parse a hello answer; ValueError if it is not one."""
        if answer.get("ok") is not True:
            raise ValueError(f"unexpected hello answer: {str(answer)[:200]}")
        if answer.get("protocol") != PROTOCOL_VERSION:
            raise ValueError(
                f"the service speaks protocol {answer.get('protocol')!r} and this bot {PROTOCOL_VERSION}: "
                "run the same version of both"
            )
        try:
            isolation = Isolation(answer["isolation"])
        except ValueError:
            isolation = Isolation.UNAVAILABLE
        return cls(
            isolation=isolation,
            languages=[str(x) for x in answer.get("languages", [])],
            describe=str(answer.get("describe", "")),
            default_timeout_s=float(answer["default_timeout_s"]),
            max_timeout_s=float(answer["max_timeout_s"]),
            queue_timeout_s=float(answer["queue_timeout_s"]),
            max_request_bytes=int(answer["max_request_bytes"]),
            max_files_in_bytes=int(answer["max_files_in_bytes"]),
            max_files_in=int(answer.get("max_files_in", MAX_FILES_IN)),
            limits=limits_from(answer.get("limits")),
        )


class ServiceNotStarted(ToolError):
    """The service could not take the run (unreachable, gone, busy) and the code did not start: another
    service may run it."""


# Failure kinds that another service would answer the same way: the request itself is wrong.
_REQUEST_ERRORS = ("bad_request", "too_large", "tool_error")


def fit_files(
    files: Mapping[str, bytes], info: ServiceInfo
) -> tuple[list[tuple[str, bytes]], tuple[str, ...]]:
    """The files in that the service takes, in order while they fit its limits; and a line for each other
    one (the run goes on without it: one big file must not cost the run every file, nor the run itself)."""
    sent: list[tuple[str, bytes]] = []
    left: list[str] = []
    room = info.max_files_in_bytes
    for name, data in files.items():
        label = f"{name} ({human_size(len(data))})"
        if not is_plain_name(name) or any(name == n for n, _ in sent):
            left.append(f"{label}: not a usable file name; not in in/")
        elif len(sent) >= info.max_files_in:
            left.append(f"{label}: over the code sandbox's limit of {info.max_files_in} files; not in in/")
        elif len(data) > room:
            left.append(
                f"{label}: over the code sandbox's limit of {human_size(info.max_files_in_bytes)} for all "
                "files of a run; not in in/"
            )
        else:
            sent.append((name, data))
            room -= len(data)
    return sent, tuple(left)


class ServiceExecutor:
    """An `Executor` that sends each run to a sandbox service over its unix socket or TCP."""

    def __init__(
        self,
        socket_path: str,
        timeout_margin_s: float = 10.0,
        connect_timeout_s: float = 5.0,
        *,
        token: str | None = None,
        own_limits: Sequence[OwnLimit] = (),
        on_limits: Callable[[], None] | None = None,
    ) -> None:
        """Ask the service for its hello now if it is up; a service that is not up yet is asked later.

        `socket_path` is a unix socket path, `unix:///path` or `tcp://host:port`; `token` is sent first on
        every connection (a TCP service requires it). `own_limits` are what the bot's settings would give a
        run: each one the service overrules is logged once its hello comes (`limit_notes` lists them).
        """
        self.socket_path = socket_path
        self.address = parse_address(socket_path)
        self.token = token
        self.timeout_margin_s = timeout_margin_s
        self.connect_timeout_s = connect_timeout_s
        self.own_limits = tuple(own_limits)
        # Told when the service's limits are first known or change (the code tool describes them again).
        self.on_limits = on_limits
        self._info: ServiceInfo | None = None
        self._seen_limits: SandboxLimits | None = None
        self._pinned: Isolation | None = None
        self._last_attempt = float("-inf")
        self.last_error: str | None = None
        self._info_sync()

    # The Executor protocol: `isolation` and `languages()` come from the cached hello.

    @property
    def isolation(self) -> Isolation:
        """The service's isolation level, or UNAVAILABLE while it cannot be reached."""
        if self._pinned is not None:
            return self._pinned
        info = self._info_sync()
        return info.isolation if info is not None else Isolation.UNAVAILABLE

    @isolation.setter
    def isolation(self, value: Isolation) -> None:
        """Pin the reported level (the `Executor` protocol declares a plain attribute)."""
        self._pinned = value

    def languages(self) -> list[str]:
        """The languages the service can run (empty while it cannot be reached)."""
        info = self._info_sync()
        return list(info.languages) if info is not None else []

    @property
    def limits(self) -> SandboxLimits | None:
        """The limits every run there gets, as its hello said (None while it cannot be reached)."""
        info = self._info_sync()
        return info.limits if info is not None else None

    def limit_notes(self) -> list[str]:
        """One line per setting of the bot's the service overrules (from its last hello, without asking)."""
        if self._info is None or self._info.limits is None:
            return []
        return disagreements(self.own_limits, self._info.limits, self.socket_path)

    def _learned(self, info: ServiceInfo) -> None:
        """Keep a hello; say which of the bot's settings it overrules, the first time its limits are seen."""
        self._info, self.last_error = info, None
        if info.limits is None or info.limits == self._seen_limits:
            return
        self._seen_limits = info.limits
        for line in self.limit_notes():
            log.warning("%s", line)
        if self.on_limits is not None:
            self.on_limits()

    def describe(self) -> str:
        """One line for the startup report."""
        info = self._info_sync()
        if info is None:
            return f"code sandbox: service at {self.socket_path}, not reachable yet ({self.last_error})"
        return f"{info.describe} [service at {self.socket_path}]"

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
        """Run `code` in the service; ToolError when the service cannot be reached or refuses the request.

        Files in that do not fit the service's limits are left out, each named in the result's
        `files_in_skipped`. `on_output` gets the run's latest line of output while it goes on.
        """
        try:
            info = self._info or await self._hello()
        except ServiceNotStarted:
            raise
        except ToolError as exc:  # an odd hello: nothing was sent to run
            raise ServiceNotStarted(str(exc)) from None
        sent, left_out = fit_files(files_in or {}, info)
        body: dict[str, Any] = {
            "op": "run",
            "code": code,
            "language": language,
            "timeout_s": timeout_s,
            "ack": True,
        }
        if on_output is not None:
            body["progress"] = True
        if sent:
            body["files_in"] = [{"name": name, "size": len(data)} for name, data in sent]
        if files_out is not None:
            body["files_out"] = {"max_files": files_out.max_files, "max_bytes": files_out.max_bytes}
        request = encode(body)
        if len(request) > info.max_request_bytes:
            raise ToolError(
                f"the program is too large for the code sandbox ({len(request)} bytes with its request; "
                f"the limit is {info.max_request_bytes})"
            )
        budget = info.default_timeout_s if timeout_s is None else max(timeout_s, 0.0)
        wait_s = info.queue_timeout_s + min(budget, info.max_timeout_s) + self.timeout_margin_s
        answer, out = await self._exchange(
            request, [data for _, data in sent], wait_s, limits=files_out, on_output=on_output
        )
        if answer.get("ok") is True and isinstance(answer.get("result"), dict):
            try:
                fields = dict(answer["result"])
                fields["files_out"] = tuple(out)
                fields["files_skipped"] = tuple(fields.get("files_skipped") or ())
                fields["files_in_skipped"] = left_out
                return ExecutionResult(**fields)
            except (TypeError, KeyError, ValueError) as exc:
                raise ToolError(
                    f"the code sandbox service sent a result this bot cannot read: {exc}"
                ) from None
        kind, error = answer.get("kind"), str(answer.get("error", "unknown error"))
        if kind == "tool_error":
            raise ToolError(error)
        if answer.get("started") is not True and kind not in _REQUEST_ERRORS:
            # No "started" line came first: the code did not run here.
            if kind == "unauthorized":
                self._forget(None, "the service refused the token")
            raise ServiceNotStarted(f"the code sandbox service refused the run ({kind}): {error}")
        raise ToolError(f"the code sandbox service refused the run ({kind}): {error}")

    async def _hello(self) -> ServiceInfo:
        """Ask for and cache the hello; ToolError if the service cannot be reached."""
        answer, _ = await self._exchange(encode({"op": "hello"}), [], self.connect_timeout_s)
        try:
            info = ServiceInfo.from_hello(answer)
        except (KeyError, TypeError, ValueError) as exc:
            if answer.get("kind") == "unauthorized":
                self._forget(None, "the service refused the token")
                raise ServiceNotStarted(
                    f"the code sandbox service at {self.socket_path} refused the token: "
                    "set the same CODE_SANDBOX_TOKEN on the bot and the service"
                ) from None
            raise ToolError(f"the code sandbox service at {self.socket_path} answered oddly: {exc}") from None
        self._learned(info)
        return info

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if isinstance(self.address, tuple):
            host, port = self.address
            return await asyncio.open_connection(host, port, limit=READ_CHUNK)
        return await asyncio.open_unix_connection(self.address, limit=READ_CHUNK)

    async def _exchange(
        self,
        request: bytes,
        files: list[bytes],
        wait_s: float,
        *,
        limits: FileLimits | None = None,
        on_output: OutputWatcher | None = None,
    ) -> tuple[dict[str, Any], list[OutputFile]]:
        """On a fresh connection: the token, one request line and its files; the answer and its files out
        (within `limits`, those the run asked for).

        A run's `{"started": true}` line may come first: the answer then carries `"started": true`, and every
        failure before it raises ServiceNotStarted (the code did not run). Progress lines (`{"output": ...}`)
        after it go to `on_output` and do not extend the `wait_s` the answer has; other lines without "ok"
        that this bot does not know are skipped.
        """
        try:
            reader, writer = await asyncio.wait_for(self._open(), self.connect_timeout_s)
        except (OSError, TimeoutError) as exc:
            self._forget(exc)
            raise ServiceNotStarted(
                f"the code sandbox service is not reachable at {self.socket_path}: {reason(exc)}"
            ) from None
        try:
            if self.token is not None:
                await self._authenticate(reader, writer)
            try:
                async with asyncio.timeout(wait_s):
                    writer.write(request)
                    await writer.drain()
                    await write_frames(writer, files)
            except ConnectionError:
                pass  # it may answer (too_large) before reading it all
            except TimeoutError:
                raise ServiceNotStarted(
                    f"the code sandbox service at {self.socket_path} did not take the request within "
                    f"{wait_s:g} s"
                ) from None
            loop = asyncio.get_running_loop()
            started = False
            deadline = loop.time() + wait_s
            while True:
                left = max(0.0, deadline - loop.time())
                answer = await self._read_answer(reader, left, before_start=not started)
                if "ok" in answer:
                    break
                if answer.get("started") is True and not started:
                    started, deadline = True, loop.time() + wait_s  # the run's own time starts now
                elif "output" in answer and on_output is not None:
                    on_output(str(answer["output"]))
            if started:
                answer = {**answer, "started": True}
            out: list[OutputFile] = []
            if answer.get("ok") is True and isinstance(answer.get("result"), dict):
                out = await self._read_files(reader, answer["result"].get("files_out") or [], limits, wait_s)
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        return answer, out

    async def _authenticate(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Send the token line first (a token service reads little of a connection before it)."""
        try:
            writer.write(encode({"op": "auth", "token": self.token}))
            await writer.drain()
        except ConnectionError as exc:
            self._forget(exc)
            raise ServiceNotStarted(
                f"the connection to the code sandbox service at {self.socket_path} failed: {reason(exc)}"
            ) from None
        said = await self._read_answer(reader, self.connect_timeout_s, before_start=True)
        if said.get("ok") is True:
            return
        if said.get("kind") == "unauthorized":
            self._forget(None, "the service refused the token")
            raise ServiceNotStarted(
                f"the code sandbox service at {self.socket_path} refused the token: "
                "set the same CODE_SANDBOX_TOKEN on the bot and the service"
            )
        raise ServiceNotStarted(
            f"the code sandbox service at {self.socket_path} refused the connection "
            f"({said.get('kind')}): {said.get('error')}"
        )

    async def _read_files(
        self, reader: asyncio.StreamReader, raw: object, limits: FileLimits | None, wait_s: float
    ) -> list[OutputFile]:
        """The files out that follow a run's answer, within the limits this bot asked for."""
        count = limits.max_files if limits is not None else 0
        size = limits.max_bytes if limits is not None else 0
        try:
            declared = declared_files(raw, max_files=count, max_bytes=size, max_total=count * size)
            return [OutputFile(name, await read_frame(reader, n, wait_s)) for name, n in declared]
        except (TypeError, ValueError) as exc:
            raise ToolError(f"the code sandbox service sent files this bot cannot take: {exc}") from None
        except (asyncio.IncompleteReadError, TimeoutError, OSError):
            raise ToolError(
                f"the code sandbox service at {self.socket_path} did not send the run's files whole"
            ) from None

    async def _read_answer(
        self, reader: asyncio.StreamReader, wait_s: float, *, before_start: bool
    ) -> dict[str, Any]:
        """Read and parse one answer line; `before_start`: a lost connection means the code did not run."""
        lost: type[ToolError] = ServiceNotStarted if before_start else ToolError
        try:
            line = await read_line(reader, MAX_ANSWER_BYTES, wait_s)
        except asyncio.IncompleteReadError:
            self._forget(None)
            if before_start:
                raise lost(
                    f"the code sandbox service at {self.socket_path} closed the connection before the run "
                    "started"
                ) from None
            raise ToolError(
                f"the code sandbox service at {self.socket_path} closed the connection without answering "
                "(it stopped or crashed during the run); the run's outcome is unknown"
            ) from None
        except TimeoutError:
            # Not retried elsewhere even before the start: the service may still start it.
            raise ToolError(
                f"the code sandbox service at {self.socket_path} did not answer within {wait_s:g} s"
            ) from None
        except (OSError, LineTooLong) as exc:
            self._forget(exc)
            raise lost(
                f"the connection to the code sandbox service at {self.socket_path} failed: {reason(exc)}"
            ) from None
        try:
            return decode(line)
        except ValueError:
            raise ToolError(
                f"the code sandbox service at {self.socket_path} sent an unreadable answer"
            ) from None

    def _forget(self, exc: BaseException | None, why: str = "connection closed") -> None:
        """Drop the cached hello: the service may come back with another configuration."""
        self._info = None
        self.last_error = reason(exc) if exc is not None else why

    @property
    def info(self) -> ServiceInfo | None:
        """The cached hello, without asking the service (None after a failed exchange)."""
        return self._info

    def _info_sync(self) -> ServiceInfo | None:
        """The cached hello, else a blocking one (a local socket: fast, or refused at once)."""
        if self._info is not None:
            return self._info
        if time.monotonic() - self._last_attempt < _INFO_RETRY_S:
            return None
        self._last_attempt = time.monotonic()
        hello: dict[str, Any] = (
            {"op": "hello"} if self.token is None else {"op": "hello", "token": self.token}
        )
        try:
            answer = blocking_exchange(self.address, encode(hello), self.connect_timeout_s)
            info = ServiceInfo.from_hello(answer)
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            self.last_error = reason(exc)
            return None
        self._learned(info)
        return info


def reason(exc: BaseException) -> str:
    """A short human-readable reason for a connection failure."""
    if isinstance(exc, FileNotFoundError):
        return "no socket there (is the sandbox service running?)"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (the service is not listening)"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, PermissionError):
        return "permission denied (check the socket's owner and mode)"
    if isinstance(exc, ValueError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


def blocking_exchange(address: tuple[str, int] | str, request: bytes, timeout_s: float) -> dict[str, Any]:
    """One small request (its token in it) and its answer line over a blocking socket (for synchronous
    callers and `--ping`)."""
    if isinstance(address, tuple):
        conn = socket.create_connection(address, timeout=timeout_s)
    else:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with conn as sock:
        sock.settimeout(timeout_s)
        if not isinstance(address, tuple):
            sock.connect(address)
        sock.sendall(request)
        buffer = bytearray()
        while not buffer.endswith(b"\n"):
            chunk = sock.recv(65_536)
            if not chunk:
                raise ConnectionError("closed without answering")
            buffer += chunk
            if len(buffer) > MAX_ANSWER_BYTES:
                raise ValueError("answer too large")
    answer = json.loads(buffer)
    if not isinstance(answer, dict):
        raise ValueError("answer is not an object")
    return answer
