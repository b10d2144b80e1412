"""The code sandbox as its own process: a `LocalExecutor` served on a unix socket or TCP, and its client.

Used by the compose deployment, where the sandbox runs in a container that holds no secrets, no database
and no network, and the bot reaches it over a socket on a shared volume. Each run is still isolated with
bwrap inside that container, exactly as on a host. Several services on other machines are reached over
TCP with a shared token (core_tools/sandbox/pool.py spreads runs over them).

Protocol (version 1), one request per connection:

- The client sends one JSON object on one line (UTF-8, ending in "\\n"), at most `MAX_REQUEST_BYTES`.
- The server answers one JSON object on one line and closes the connection.
- `{"op": "hello"}` -> `{"ok": true, "protocol": 1, "isolation": "bwrap", "languages": ["python"],
  "describe": "...", "default_timeout_s": 30, "max_timeout_s": 120, "queue_timeout_s": 60,
  "max_concurrent": 8, "max_request_bytes": 1048576}`
- `{"op": "run", "code": "...", "language": "python", "timeout_s": 5}` (`timeout_s` may be null) ->
  `{"ok": true, "result": {...every field of ExecutionResult...}}`
- With `"ack": true` in a run request, the service first sends `{"started": true}` on its own line when the
  run takes its slot and the code is about to start, then the answer: a client whose connection fails
  before that line knows the code never ran and may send it to another service.
- With `"progress": true` as well, the service sends `{"output": "<line>"}` lines between those two: the
  latest complete line of the run's output, at most one a second and only when it changed, cut to
  `MAX_OUTPUT_LINE_CHARS` (for the chat's status line). A service that predates this ignores the field.
- A service started with a token (`CODE_SANDBOX_TOKEN`; required for TCP) answers only requests that carry
  it: `{"op": ..., "token": "..."}`; anything else gets kind `unauthorized`.
- Any failure -> `{"ok": false, "kind": KIND, "error": "one readable line"}` where KIND is `bad_request`,
  `too_large`, `tool_error` (unknown language, bad timeout: the same errors a LocalExecutor raises),
  `busy` (no free slot within `queue_timeout_s`, or too many waiting), `unauthorized` or `internal`.

At most `max_concurrent` runs execute at once; further requests wait for a slot up to `queue_timeout_s`,
and beyond `4 * max_concurrent` waiting requests the answer is `busy` at once.

Entry point: `python -m core_tools.sandbox.service --socket /run/sandbox/sandbox.sock [--allow-unsandboxed]
[--max-concurrent 8]`, or `--listen 0.0.0.0:8700` with the token in the environment variable
`CODE_SANDBOX_TOKEN` (never on the command line, where `ps` shows it); `--ping` asks a running service for
its hello and exits 0 if it answered and can isolate code (or runs unsandboxed because `--allow-unsandboxed`
says so), else 1 with one line naming the cause (the container's health check).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import contextlib
import dataclasses
import hmac
import json
import logging
import os
import signal
import socket
import stat
import sys
import time
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from typing import Any

from core_tools.errors import ToolError
from core_tools.sandbox.executor import LocalExecutor, describe
from core_tools.sandbox.guardian import Guardian
from core_tools.sandbox.model import ExecutionResult, FileLimits, Isolation, OutputWatcher, SandboxLimits
from core_tools.types import OutputFile

log = logging.getLogger("core_tools.sandbox.service")  # not "__main__" when run with -m

PROTOCOL_VERSION = 1
MAX_REQUEST_BYTES = 1_048_576  # one request line, JSON included: about 1 MB of code at most
MAX_ANSWER_BYTES = 16 * 1_048_576  # a result holds capped output, but JSON escapes can inflate it
DEFAULT_SOCKET = "/run/sandbox/sandbox.sock"
_READ_REQUEST_TIMEOUT_S = 30.0  # a client that connects and says nothing is dropped after this
_SHUTDOWN_GRACE_S = 10.0  # on SIGTERM, how long running code may finish before it is killed
_INFO_RETRY_S = 5.0  # after a failed hello, synchronous callers do not retry before this
MAX_OUTPUT_LINE_CHARS = 1000  # a progress line of output, as sent to the client
_OUTPUT_EVERY_S = 1.0  # at most one progress line a second
USERNS_HINT = (
    "in a container the sandbox needs the seccomp profile deploy/seccomp-bwrap.json (Docker's default one "
    "forbids the namespace, mount and sethostname calls bwrap makes), systempaths=unconfined and "
    "apparmor=unconfined, as deploy/docker-compose.yml sets them; and the host must allow unprivileged user "
    "namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 23.10+ also "
    "kernel.apparmor_restrict_unprivileged_userns=0): see deploy/README.md"
)


def _encode(message: dict[str, Any]) -> bytes:
    """One protocol line."""
    return json.dumps(message, ensure_ascii=False).encode("utf-8") + b"\n"


def _failure(kind: str, error: str) -> dict[str, Any]:
    """A failure answer."""
    return {"ok": False, "kind": kind, "error": error}


class SandboxService:
    """Serves one `LocalExecutor` on a unix socket with bounded concurrency."""

    def __init__(
        self,
        executor: LocalExecutor,
        socket_path: str,
        *,
        max_concurrent: int = 8,
        queue_timeout_s: float = 60.0,
        max_request_bytes: int = MAX_REQUEST_BYTES,
        socket_mode: int = 0o660,
        listen: tuple[str, int] | None = None,
        token: str | None = None,
    ) -> None:
        """Nothing is bound until `start`; `socket_path` may be empty when `listen` (TCP) is given."""
        if max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
        if listen is not None and not token:
            raise ValueError("a sandbox service on TCP needs a token (CODE_SANDBOX_TOKEN)")
        self.listen = listen
        self.token = token
        self.executor = executor
        self.socket_path = socket_path
        self.max_concurrent = max_concurrent
        self.queue_timeout_s = queue_timeout_s
        self.max_request_bytes = max_request_bytes
        self.socket_mode = socket_mode
        self.max_waiting = 4 * max_concurrent
        self._slots = asyncio.Semaphore(max_concurrent)
        self._waiting = 0
        self._running = 0
        self._started = 0
        self._server: asyncio.Server | None = None
        self._tcp: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    @property
    def tcp_port(self) -> int | None:
        """The TCP port listened on (the real one when 0 was asked), or None."""
        if self._tcp is None or not self._tcp.sockets:
            return None
        return int(self._tcp.sockets[0].getsockname()[1])

    def hello(self) -> dict[str, Any]:
        """The answer to `hello`: what this service runs and its limits."""
        limits = self.executor.limits
        return {
            "ok": True,
            "protocol": PROTOCOL_VERSION,
            "isolation": str(self.executor.isolation),
            "isolation_reason": self.executor.isolation_reason,
            "languages": self.executor.languages(),
            "describe": describe(self.executor),
            "default_timeout_s": limits.timeout_s,
            "max_timeout_s": limits.max_timeout_s,
            "queue_timeout_s": self.queue_timeout_s,
            "max_concurrent": self.max_concurrent,
            "max_request_bytes": self.max_request_bytes,
            "running": self._running,
            "waiting": self._waiting,
            "started": self._started,
        }

    async def start(self) -> None:
        """Remove a stale socket, bind, and make the socket reachable by the bot's user; listen on TCP."""
        if self.listen is not None:
            host, port = self.listen
            self._tcp = await asyncio.start_server(
                self._on_connect, host, port, limit=self.max_request_bytes, reuse_address=True
            )
        if not self.socket_path:
            return
        _remove_stale_socket(self.socket_path)
        directory = os.path.dirname(self.socket_path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        self._server = await asyncio.start_unix_server(
            self._on_connect, path=self.socket_path, limit=self.max_request_bytes
        )
        os.chmod(self.socket_path, self.socket_mode)

    async def stop(self, grace_s: float = _SHUTDOWN_GRACE_S) -> None:
        """Stop accepting, give running code `grace_s` to finish, cancel the rest, remove the socket."""
        for server in (self._server, self._tcp):
            if server is not None:
                server.close()
        if self._handlers:
            _done, pending = await asyncio.wait(set(self._handlers), timeout=grace_s)
            for task in pending:
                task.cancel()  # LocalExecutor kills and reaps the sandbox on cancellation
            await asyncio.gather(*pending, return_exceptions=True)
        for server in (self._server, self._tcp):
            if server is not None:
                await server.wait_closed()
        if self.socket_path:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.socket_path)

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            try:
                answer = await self._answer(reader, writer)
            except Exception as exc:  # the protocol promises an answer line for any failure
                log.exception("request failed inside the sandbox service")
                answer = _failure("internal", f"internal error in the sandbox service: {type(exc).__name__}")
            with contextlib.suppress(ConnectionError):
                writer.write(_encode(answer))
                await writer.drain()
        except asyncio.CancelledError:
            with contextlib.suppress(ConnectionError, RuntimeError):
                writer.write(_encode(_failure("internal", "the sandbox service is shutting down")))
            raise
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            if task is not None:
                self._handlers.discard(task)

    async def _answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> dict[str, Any]:
        """Read one request line and produce the answer (never raises for a bad request)."""
        try:
            line = await asyncio.wait_for(reader.readuntil(b"\n"), _READ_REQUEST_TIMEOUT_S)
        except asyncio.LimitOverrunError:
            return _failure(
                "too_large",
                f"request larger than the sandbox service's limit of {self.max_request_bytes} bytes",
            )
        except asyncio.IncompleteReadError:
            return _failure("bad_request", "the request did not end with a newline")
        except TimeoutError:
            return _failure("bad_request", "no request line received in time")
        try:
            request = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            return _failure("bad_request", f"the request is not valid JSON: {exc}")
        except RecursionError:  # the stdlib parser recurses once per nested array or object
            return _failure("bad_request", "the request's JSON is nested too deeply")
        if not isinstance(request, dict):
            return _failure("bad_request", "the request must be a JSON object")
        if self.token is not None:
            given = request.get("token")
            if not isinstance(given, str) or not hmac.compare_digest(given.encode(), self.token.encode()):
                return _failure("unauthorized", "wrong or missing token: set the same CODE_SANDBOX_TOKEN")
        op = request.get("op")
        if op == "hello":
            return self.hello()
        if op == "run":
            return await self._run(request, reader, writer if request.get("ack") is True else None)
        return _failure("bad_request", f"unknown op {op!r}; expected hello or run")

    async def _run(
        self, request: dict[str, Any], reader: asyncio.StreamReader, ack: asyncio.StreamWriter | None = None
    ) -> dict[str, Any]:
        """Validate a run request, wait for a slot, say it started (when asked), run it unless the client
        leaves."""
        code = request.get("code")
        language = request.get("language", "python")
        timeout_s = request.get("timeout_s")
        if not isinstance(code, str) or not isinstance(language, str):
            return _failure("bad_request", "run needs `code` and `language` as strings")
        if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float)):
            return _failure("bad_request", "`timeout_s` must be a number or null")
        try:
            files_in, files_out = _decode_files(request)
        except (TypeError, ValueError, KeyError, binascii.Error) as exc:
            return _failure("bad_request", f"bad files_in or files_out: {exc}")
        if self._waiting >= self.max_waiting:
            return _failure(
                "busy", f"the code sandbox is busy ({self._waiting} runs waiting); try again later"
            )
        self._waiting += 1
        try:
            await asyncio.wait_for(self._slots.acquire(), self.queue_timeout_s)
        except TimeoutError:
            return _failure(
                "busy",
                f"the code sandbox is busy: no free slot within {self.queue_timeout_s:g} s "
                f"({self.max_concurrent} runs at once); try again later",
            )
        finally:
            self._waiting -= 1
        self._running += 1
        self._started += 1
        output = _Output() if ack is not None and request.get("progress") is True else None
        reporter: asyncio.Task[None] | None = None
        try:
            if ack is not None:
                # From here the code may run: a client that sees this line must not send it elsewhere.
                ack.write(_encode({"started": True}))
                await ack.drain()
                if output is not None:
                    reporter = asyncio.create_task(output.report(ack))
            result = await _unless_client_leaves(
                self.executor.run(
                    code,
                    language,
                    None if timeout_s is None else float(timeout_s),
                    files_in=files_in,
                    files_out=files_out,
                    on_output=output.see if output is not None else None,
                ),
                reader,
            )
        except _ClientGone:
            log.info("the client closed the connection mid-run (a stopped turn): the run was killed")
            return _failure("internal", "the client closed the connection; the run was killed")
        except ToolError as exc:
            return _failure("tool_error", str(exc))
        except Exception as exc:  # the service must keep serving whatever one run does
            log.exception("run failed inside the sandbox service")
            return _failure("internal", f"internal error in the sandbox service: {type(exc).__name__}: {exc}")
        finally:
            if reporter is not None:  # no progress line may follow (or split) the answer
                reporter.cancel()
                await asyncio.wait({reporter})
            self._running -= 1
            self._slots.release()
        if result.error_category == "refused":
            result = dataclasses.replace(result, stderr=f"{result.stderr}\nSandbox service: {USERNS_HINT}.")
        answer = dataclasses.asdict(result)
        # Bytes do not go into JSON: each file out travels as base64.
        answer["files_out"] = [
            {"name": f.name, "data": base64.b64encode(f.data).decode("ascii")} for f in result.files_out
        ]
        return {"ok": True, "result": answer}


def _decode_files(request: dict[str, Any]) -> tuple[dict[str, bytes] | None, FileLimits | None]:
    """The run request's files in (name -> base64) and out limits, checked."""
    raw_in = request.get("files_in")
    files_in = None
    if raw_in is not None:
        if not isinstance(raw_in, dict):
            raise TypeError("files_in must be an object of name -> base64")
        files_in = {str(k): base64.b64decode(str(v), validate=True) for k, v in raw_in.items()}
    raw_out = request.get("files_out")
    files_out = None
    if raw_out is not None:
        if not isinstance(raw_out, dict):
            raise TypeError("files_out must be an object with max_files and max_bytes")
        files_out = FileLimits(int(raw_out["max_files"]), int(raw_out["max_bytes"]))
    return files_in, files_out


def _remove_stale_socket(path: str) -> None:
    """Delete a socket file nobody listens on; refuse to touch a live socket or any other kind of file."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(mode):
        raise RuntimeError(f"{path} exists and is not a socket; not removing it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except OSError:
        os.unlink(path)  # stale: left behind by a service that was killed
        return
    finally:
        probe.close()
    raise RuntimeError(f"another sandbox service is already listening on {path}")


# --- the client ------------------------------------------------------------------------------------


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

    @classmethod
    def from_hello(cls, answer: dict[str, Any]) -> ServiceInfo:
        """Parse a hello answer; ValueError if it is not one."""
        if answer.get("ok") is not True or answer.get("protocol") != PROTOCOL_VERSION:
            raise ValueError(f"unexpected hello answer: {str(answer)[:200]}")
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
        )


class ServiceNotStarted(ToolError):
    """The service could not take the run (unreachable, gone, busy) and the code did not start: another
    service may run it."""


# Failure kinds that another service would answer the same way: the request itself is wrong.
_REQUEST_ERRORS = ("bad_request", "too_large", "tool_error")


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


class _Output:
    """The latest line of a run's output, sent to the client as progress lines (`"progress": true`)."""

    def __init__(self) -> None:
        self.line: str | None = None

    def see(self, line: str) -> None:
        """The executor's report of a new latest line."""
        self.line = line

    async def report(self, writer: asyncio.StreamWriter) -> None:
        """Send the latest line once a second while it changes, until cancelled."""
        sent: str | None = None
        while True:
            await asyncio.sleep(_OUTPUT_EVERY_S)
            line = self.line
            if line is not None and line != sent:
                writer.write(_encode({"output": line[:MAX_OUTPUT_LINE_CHARS]}))
                await writer.drain()
                sent = line


class _ClientGone(Exception):
    """The client closed its connection while its run was going."""


async def _unless_client_leaves(
    run: Coroutine[Any, Any, ExecutionResult], reader: asyncio.StreamReader
) -> ExecutionResult:
    """Await a run, cancelling it (LocalExecutor then kills its process tree) when the client's connection
    closes first: a stopped turn must not leave its code running here."""
    task = asyncio.ensure_future(run)
    gone = asyncio.ensure_future(reader.read(1))  # the client sends nothing more: b"" means it left
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            if gone.exception() is None and gone.result() != b"":
                return await task  # the client sent more bytes: odd, but it is still there
            task.cancel()
            await asyncio.wait({task})
            raise _ClientGone
        return task.result()
    finally:
        gone.cancel()
        if not task.done():  # this handler itself was cancelled (shutdown)
            task.cancel()
            await asyncio.wait({task})


class ServiceExecutor:
    """An `Executor` that sends each run to a sandbox service over its unix socket or TCP."""

    def __init__(
        self,
        socket_path: str,
        timeout_margin_s: float = 10.0,
        connect_timeout_s: float = 5.0,
        *,
        token: str | None = None,
    ) -> None:
        """Ask the service for its hello now if it is up; a service that is not up yet is asked later.

        `socket_path` is a unix socket path, `unix:///path` or `tcp://host:port`; `token` is sent with every
        request (a TCP service requires it).
        """
        self.socket_path = socket_path
        self.address = parse_address(socket_path)
        self.token = token
        self.timeout_margin_s = timeout_margin_s
        self.connect_timeout_s = connect_timeout_s
        self._info: ServiceInfo | None = None
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

        `on_output` gets the run's latest line of output while it goes on, from a service that sends it."""
        try:
            info = self._info or await self._hello()
        except ServiceNotStarted:
            raise
        except ToolError as exc:  # an odd hello: nothing was sent to run
            raise ServiceNotStarted(str(exc)) from None
        body: dict[str, Any] = {
            "op": "run",
            "code": code,
            "language": language,
            "timeout_s": timeout_s,
            "ack": True,
        }
        if on_output is not None:
            body["progress"] = True
        if files_in:
            body["files_in"] = {k: base64.b64encode(v).decode("ascii") for k, v in files_in.items()}
        if files_out is not None:
            body["files_out"] = {"max_files": files_out.max_files, "max_bytes": files_out.max_bytes}
        request = self._encode(body)
        if len(request) > info.max_request_bytes:
            raise ToolError(
                f"the program is too large for the code sandbox ({len(request)} bytes with its request; "
                f"the limit is {info.max_request_bytes})"
            )
        budget = info.default_timeout_s if timeout_s is None else max(timeout_s, 0.0)
        wait_s = info.queue_timeout_s + min(budget, info.max_timeout_s) + self.timeout_margin_s
        answer = await self._exchange(request, wait_s, ack=True, on_output=on_output)
        if answer.get("ok") is True and isinstance(answer.get("result"), dict):
            try:
                fields = dict(answer["result"])
                fields["files_out"] = tuple(
                    OutputFile(str(f["name"]), base64.b64decode(str(f["data"])))
                    for f in fields.get("files_out") or []
                )
                fields["files_skipped"] = tuple(fields.get("files_skipped") or ())
                return ExecutionResult(**fields)
            except (TypeError, KeyError, ValueError, binascii.Error) as exc:
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

    def _encode(self, message: dict[str, Any]) -> bytes:
        if self.token is not None:
            message = {**message, "token": self.token}
        return _encode(message)

    async def _hello(self) -> ServiceInfo:
        """Ask for and cache the hello; ToolError if the service cannot be reached."""
        answer = await self._exchange(self._encode({"op": "hello"}), self.connect_timeout_s)
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
        self._info, self.last_error = info, None
        return info

    async def _open(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if isinstance(self.address, tuple):
            host, port = self.address
            return await asyncio.open_connection(host, port, limit=MAX_ANSWER_BYTES)
        return await asyncio.open_unix_connection(self.address, limit=MAX_ANSWER_BYTES)

    async def _exchange(
        self, request: bytes, wait_s: float, *, ack: bool = False, on_output: OutputWatcher | None = None
    ) -> dict[str, Any]:
        """Send one request line and read one answer line on a fresh connection.

        With `ack`, a `{"started": true}` line may come first: the answer then carries `"started": true`,
        and every failure before it raises ServiceNotStarted (the code did not run). Progress lines
        (`{"output": ...}`) after it go to `on_output`; they do not extend the `wait_s` the answer has.
        """
        try:
            reader, writer = await asyncio.wait_for(self._open(), self.connect_timeout_s)
        except (OSError, TimeoutError) as exc:
            self._forget(exc)
            raise ServiceNotStarted(
                f"the code sandbox service is not reachable at {self.socket_path}: {_reason(exc)}"
            ) from None
        try:
            with contextlib.suppress(ConnectionError):  # it may answer (too_large) before reading it all
                writer.write(request)
                await writer.drain()
            answer = await self._read_answer(reader, wait_s, before_start=ack)
            if ack and answer.get("started") is True:
                deadline = asyncio.get_running_loop().time() + wait_s
                while True:
                    left = max(0.0, deadline - asyncio.get_running_loop().time())
                    answer = await self._read_answer(reader, left, before_start=False)
                    if "output" not in answer or "ok" in answer:
                        break
                    if on_output is not None:
                        on_output(str(answer["output"]))
                answer = {**answer, "started": True}
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        return answer

    async def _read_answer(
        self, reader: asyncio.StreamReader, wait_s: float, *, before_start: bool
    ) -> dict[str, Any]:
        """Read and parse one answer line; `before_start`: a lost connection means the code did not run."""
        lost: type[ToolError] = ServiceNotStarted if before_start else ToolError
        try:
            line = await asyncio.wait_for(reader.readuntil(b"\n"), wait_s)
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
        except (OSError, asyncio.LimitOverrunError) as exc:
            self._forget(exc)
            raise lost(
                f"the connection to the code sandbox service at {self.socket_path} failed: {_reason(exc)}"
            ) from None
        try:
            answer = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise ToolError(
                f"the code sandbox service at {self.socket_path} sent an unreadable answer"
            ) from None
        if not isinstance(answer, dict):
            raise ToolError(f"the code sandbox service at {self.socket_path} sent an unreadable answer")
        return answer

    def _forget(self, exc: BaseException | None, why: str = "connection closed") -> None:
        """Drop the cached hello: the service may come back with another configuration."""
        self._info = None
        self.last_error = _reason(exc) if exc is not None else why

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
        try:
            answer = _blocking_exchange(self.address, self._encode({"op": "hello"}), self.connect_timeout_s)
            self._info = ServiceInfo.from_hello(answer)
            self.last_error = None
        except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
            self.last_error = _reason(exc)
            return None
        return self._info


def _reason(exc: BaseException) -> str:
    """A short human-readable reason for a connection failure."""
    if isinstance(exc, FileNotFoundError):
        return "no socket there (is the sandbox service running?)"
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (the service is not listening)"
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, PermissionError):
        return "permission denied (check the socket's owner and mode)"
    return f"{type(exc).__name__}: {exc}"


def _blocking_exchange(address: tuple[str, int] | str, request: bytes, timeout_s: float) -> dict[str, Any]:
    """One request/answer over a blocking socket (for synchronous callers and `--ping`)."""
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


# --- entry point -----------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    """The command line."""
    parser = argparse.ArgumentParser(
        prog="python -m core_tools.sandbox.service",
        description="Serve the code sandbox on a unix socket (one JSON request line, one JSON answer line).",
    )
    parser.add_argument(
        "--socket", default=None, help=f"socket path (default {DEFAULT_SOCKET} unless --listen)"
    )
    parser.add_argument(
        "--listen", default=None, help="also (or only) serve on TCP HOST:PORT; needs CODE_SANDBOX_TOKEN"
    )
    parser.add_argument("--max-concurrent", type=int, default=8, help="runs at once (default 8)")
    parser.add_argument("--queue-timeout", type=float, default=60.0, help="seconds a run waits for a slot")
    parser.add_argument("--timeout", type=float, default=30.0, help="default wall clock of a run, seconds")
    parser.add_argument("--max-timeout", type=float, default=120.0, help="largest wall clock a run may ask")
    parser.add_argument("--memory-mb", type=int, default=512, help="memory limit of a run (default 512)")
    parser.add_argument("--socket-mode", default="660", help="octal mode of the socket file (default 660)")
    parser.add_argument("--allow-unsandboxed", action="store_true", help="run without isolation if no bwrap")
    parser.add_argument(
        "--python-env",
        default="/opt/assistant-sandbox",
        help="the data toolkit's environment (numpy, pandas, matplotlib), used when it exists",
    )
    parser.add_argument(
        "--ping", action="store_true", help="health check: exit 0 if it answers and can isolate, else 1"
    )
    return parser


def _listen_address(value: str | None) -> tuple[str, int] | None:
    if value is None:
        return None
    address = parse_address(f"tcp://{value}")
    assert isinstance(address, tuple)
    return address


async def serve(args: argparse.Namespace, token: str | None = None) -> None:
    """Run the service until SIGTERM or SIGINT."""
    limits = SandboxLimits(timeout_s=args.timeout, max_timeout_s=args.max_timeout, memory_mb=args.memory_mb)
    executor = LocalExecutor(limits, allow_unsandboxed=args.allow_unsandboxed, python_env=args.python_env)
    # Kills what is left of every run if this process dies; started before any socket exists.
    guardian = Guardian(os.getpid(), executor.run_parent.path if executor.run_parent else None)
    executor.guardian = guardian
    try:
        service = SandboxService(
            executor,
            args.socket or "",
            max_concurrent=args.max_concurrent,
            queue_timeout_s=args.queue_timeout,
            socket_mode=int(args.socket_mode, 8),
            listen=_listen_address(args.listen),
            token=token,
        )
        await service.start()
        where = " and ".join(
            x for x in (args.socket, f"tcp port {service.tcp_port}" if args.listen else None) if x
        )
        line = f"{describe(executor)}; serving on {where}, {args.max_concurrent} runs at once"
        line += f"; runs die with this service (guardian pid {guardian.pid})"
        if executor.isolation is Isolation.UNAVAILABLE:
            line += f"; every run will be refused: {USERNS_HINT}"
        log.info("%s", line)
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stopping.set)
        await stopping.wait()
        log.info("stopping: waiting up to %g s for running code", _SHUTDOWN_GRACE_S)
        await service.stop()
    finally:
        await asyncio.to_thread(guardian.close)  # every run is stopped by now: it finds nothing to kill


def ping(socket_path: str, token: str | None = None) -> int:
    """The health check: 0 if the service answers and can isolate code (or was told to run unsandboxed).

    A service that answers but would refuse every run is not healthy: the one line printed names the cause.
    `socket_path` may be `tcp://host:port` (then with the token).
    """
    hello: dict[str, Any] = {"op": "hello"} if token is None else {"op": "hello", "token": token}
    try:
        answer = _blocking_exchange(parse_address(socket_path), _encode(hello), 5.0)
        if answer.get("kind") == "unauthorized":
            print(
                f"sandbox service at {socket_path} refused the token: {answer.get('error')}", file=sys.stderr
            )
            return 1
        info = ServiceInfo.from_hello(answer)
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        print(f"sandbox service at {socket_path} is not answering: {_reason(exc)}", file=sys.stderr)
        return 1
    if info.isolation is Isolation.UNAVAILABLE:
        reason = " ".join(str(answer.get("isolation_reason") or "no reason given").split())
        print(
            f"sandbox service at {socket_path} cannot isolate code, every run is refused: {reason} "
            "(see deploy/README.md)",
            file=sys.stderr,
        )
        return 1
    print(info.describe)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and serve (or ping)."""
    args = _parser().parse_args(argv)
    # Its own program: the shared secret comes from the environment, never from argv (visible in `ps`).
    token = os.environ.get("CODE_SANDBOX_TOKEN") or None
    if args.listen is not None and token is None:
        print("error: --listen (TCP) needs the shared token in CODE_SANDBOX_TOKEN", file=sys.stderr)
        return 2
    if args.socket is None and args.listen is None:
        args.socket = DEFAULT_SOCKET
    try:
        _listen_address(args.listen)
    except ValueError as exc:
        print(f"error: --listen: {exc}", file=sys.stderr)
        return 2
    if args.ping:
        target = args.socket if args.socket else f"tcp://{args.listen}"
        return ping(target, token)
    if args.max_concurrent < 1 or args.timeout <= 0 or args.max_timeout <= 0:
        print("error: --max-concurrent, --timeout and --max-timeout must be positive", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(serve(args, token))
    except (RuntimeError, OSError) as exc:  # a live service on the socket, or a non-socket file in the way
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
