"""The code sandbox as its own process: a `LocalExecutor` served on a unix socket, and its client.

Used by the compose deployment, where the sandbox runs in a container that holds no secrets, no database
and no network, and the bot reaches it over a socket on a shared volume. Each run is still isolated with
bwrap inside that container, exactly as on a host.

Protocol (version 1), one request per connection:

- The client sends one JSON object on one line (UTF-8, ending in "\\n"), at most `MAX_REQUEST_BYTES`.
- The server answers one JSON object on one line and closes the connection.
- `{"op": "hello"}` -> `{"ok": true, "protocol": 1, "isolation": "bwrap", "languages": ["python"],
  "describe": "...", "default_timeout_s": 30, "max_timeout_s": 120, "queue_timeout_s": 60,
  "max_concurrent": 8, "max_request_bytes": 1048576}`
- `{"op": "run", "code": "...", "language": "python", "timeout_s": 5}` (`timeout_s` may be null) ->
  `{"ok": true, "result": {...every field of ExecutionResult...}}`
- Any failure -> `{"ok": false, "kind": KIND, "error": "one readable line"}` where KIND is `bad_request`,
  `too_large`, `tool_error` (unknown language, bad timeout: the same errors a LocalExecutor raises),
  `busy` (no free slot within `queue_timeout_s`, or too many waiting) or `internal`.

At most `max_concurrent` runs execute at once; further requests wait for a slot up to `queue_timeout_s`,
and beyond `4 * max_concurrent` waiting requests the answer is `busy` at once.

Entry point: `python -m core_tools.sandbox.service --socket /run/sandbox/sandbox.sock [--allow-unsandboxed]
[--max-concurrent 8]`; `--ping` asks a running service for its hello and exits 0 if it answered and can
isolate code (or runs unsandboxed because `--allow-unsandboxed` says so), else 1 with one line naming the
cause (the container's health check).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import binascii
import contextlib
import dataclasses
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
from core_tools.sandbox.model import ExecutionResult, FileLimits, Isolation, SandboxLimits
from core_tools.types import OutputFile

log = logging.getLogger("core_tools.sandbox.service")  # not "__main__" when run with -m

PROTOCOL_VERSION = 1
MAX_REQUEST_BYTES = 1_048_576  # one request line, JSON included: about 1 MB of code at most
MAX_ANSWER_BYTES = 16 * 1_048_576  # a result holds capped output, but JSON escapes can inflate it
DEFAULT_SOCKET = "/run/sandbox/sandbox.sock"
_READ_REQUEST_TIMEOUT_S = 30.0  # a client that connects and says nothing is dropped after this
_SHUTDOWN_GRACE_S = 10.0  # on SIGTERM, how long running code may finish before it is killed
_INFO_RETRY_S = 5.0  # after a failed hello, synchronous callers do not retry before this
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
    ) -> None:
        """Nothing is bound until `start`."""
        if max_concurrent < 1:
            raise ValueError("max_concurrent must be at least 1")
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
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

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
        }

    async def start(self) -> None:
        """Remove a stale socket, bind, and make the socket reachable by the bot's user."""
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
        if self._server is not None:
            self._server.close()
        if self._handlers:
            _done, pending = await asyncio.wait(set(self._handlers), timeout=grace_s)
            for task in pending:
                task.cancel()  # LocalExecutor kills and reaps the sandbox on cancellation
            await asyncio.gather(*pending, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            try:
                answer = await self._answer(reader)
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

    async def _answer(self, reader: asyncio.StreamReader) -> dict[str, Any]:
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
        op = request.get("op")
        if op == "hello":
            return self.hello()
        if op == "run":
            return await self._run(request, reader)
        return _failure("bad_request", f"unknown op {op!r}; expected hello or run")

    async def _run(self, request: dict[str, Any], reader: asyncio.StreamReader) -> dict[str, Any]:
        """Validate a run request, wait for a slot, run it."""
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
        try:
            result = await _unless_client_leaves(
                self.executor.run(
                    code,
                    language,
                    None if timeout_s is None else float(timeout_s),
                    files_in=files_in,
                    files_out=files_out,
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
    """An `Executor` that sends each run to a sandbox service over its unix socket."""

    def __init__(
        self, socket_path: str, timeout_margin_s: float = 10.0, connect_timeout_s: float = 5.0
    ) -> None:
        """Ask the service for its hello now if it is up; a service that is not up yet is asked later."""
        self.socket_path = socket_path
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
    ) -> ExecutionResult:
        """Run `code` in the service; ToolError when the service cannot be reached or refuses the request."""
        info = self._info or await self._hello()
        body: dict[str, Any] = {"op": "run", "code": code, "language": language, "timeout_s": timeout_s}
        if files_in:
            body["files_in"] = {k: base64.b64encode(v).decode("ascii") for k, v in files_in.items()}
        if files_out is not None:
            body["files_out"] = {"max_files": files_out.max_files, "max_bytes": files_out.max_bytes}
        request = _encode(body)
        if len(request) > info.max_request_bytes:
            raise ToolError(
                f"the program is too large for the code sandbox ({len(request)} bytes with its request; "
                f"the limit is {info.max_request_bytes})"
            )
        budget = info.default_timeout_s if timeout_s is None else max(timeout_s, 0.0)
        wait_s = info.queue_timeout_s + min(budget, info.max_timeout_s) + self.timeout_margin_s
        answer = await self._exchange(request, wait_s)
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
        raise ToolError(f"the code sandbox service refused the run ({kind}): {error}")

    async def _hello(self) -> ServiceInfo:
        """Ask for and cache the hello; ToolError if the service cannot be reached."""
        answer = await self._exchange(_encode({"op": "hello"}), self.connect_timeout_s)
        try:
            info = ServiceInfo.from_hello(answer)
        except (KeyError, TypeError, ValueError) as exc:
            raise ToolError(f"the code sandbox service at {self.socket_path} answered oddly: {exc}") from None
        self._info, self.last_error = info, None
        return info

    async def _exchange(self, request: bytes, wait_s: float) -> dict[str, Any]:
        """Send one request line and read one answer line on a fresh connection."""
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_unix_connection(self.socket_path, limit=MAX_ANSWER_BYTES), self.connect_timeout_s
            )
        except (OSError, TimeoutError) as exc:
            self._forget(exc)
            raise ToolError(
                f"the code sandbox service is not reachable at {self.socket_path}: {_reason(exc)}"
            ) from None
        try:
            with contextlib.suppress(ConnectionError):  # it may answer (too_large) before reading it all
                writer.write(request)
                await writer.drain()
            try:
                line = await asyncio.wait_for(reader.readuntil(b"\n"), wait_s)
            except asyncio.IncompleteReadError:
                self._forget(None)
                raise ToolError(
                    f"the code sandbox service at {self.socket_path} closed the connection without answering "
                    "(it stopped or crashed during the run); the run's outcome is unknown"
                ) from None
            except TimeoutError:
                raise ToolError(
                    f"the code sandbox service at {self.socket_path} did not answer within {wait_s:g} s"
                ) from None
            except (OSError, asyncio.LimitOverrunError) as exc:
                self._forget(exc)
                raise ToolError(
                    f"the connection to the code sandbox service at {self.socket_path} failed: {_reason(exc)}"
                ) from None
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
        try:
            answer = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise ToolError(
                f"the code sandbox service at {self.socket_path} sent an unreadable answer"
            ) from None
        if not isinstance(answer, dict):
            raise ToolError(f"the code sandbox service at {self.socket_path} sent an unreadable answer")
        return answer

    def _forget(self, exc: BaseException | None) -> None:
        """Drop the cached hello: the service may come back with another configuration."""
        self._info = None
        self.last_error = _reason(exc) if exc is not None else "connection closed"

    def _info_sync(self) -> ServiceInfo | None:
        """The cached hello, else a blocking one (a local socket: fast, or refused at once)."""
        if self._info is not None:
            return self._info
        if time.monotonic() - self._last_attempt < _INFO_RETRY_S:
            return None
        self._last_attempt = time.monotonic()
        try:
            answer = _blocking_exchange(self.socket_path, _encode({"op": "hello"}), self.connect_timeout_s)
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


def _blocking_exchange(path: str, request: bytes, timeout_s: float) -> dict[str, Any]:
    """One request/answer over a blocking socket (for synchronous callers and `--ping`)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout_s)
        sock.connect(path)
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
    parser.add_argument("--socket", default=DEFAULT_SOCKET, help=f"socket path (default {DEFAULT_SOCKET})")
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


async def serve(args: argparse.Namespace) -> None:
    """Run the service until SIGTERM or SIGINT."""
    limits = SandboxLimits(timeout_s=args.timeout, max_timeout_s=args.max_timeout, memory_mb=args.memory_mb)
    executor = LocalExecutor(limits, allow_unsandboxed=args.allow_unsandboxed, python_env=args.python_env)
    service = SandboxService(
        executor,
        args.socket,
        max_concurrent=args.max_concurrent,
        queue_timeout_s=args.queue_timeout,
        socket_mode=int(args.socket_mode, 8),
    )
    await service.start()
    line = f"{describe(executor)}; serving on {args.socket}, {args.max_concurrent} runs at once"
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


def ping(socket_path: str) -> int:
    """The health check: 0 if the service answers and can isolate code (or was told to run unsandboxed).

    A service that answers but would refuse every run is not healthy: the one line printed names the cause.
    """
    try:
        answer = _blocking_exchange(socket_path, _encode({"op": "hello"}), 5.0)
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
    if args.ping:
        return ping(args.socket)
    if args.max_concurrent < 1 or args.timeout <= 0 or args.max_timeout <= 0:
        print("error: --max-concurrent, --timeout and --max-timeout must be positive", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        asyncio.run(serve(args))
    except RuntimeError as exc:  # a live service on the socket, or a non-socket file in the way
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
