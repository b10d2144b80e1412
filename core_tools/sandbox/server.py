"""The sandbox service's server: one `LocalExecutor` on a unix socket and/or TCP (protocol.py says how).

What any client may cost it is bounded before it proves anything: at most `max_connections` connections are
held (the oldest one that has not sent its request yet makes room for a new one; when every connection is
a client's request, a new one is refused with kind `busy`), a token service reads at most
`PREAUTH_MAX_BYTES` of a connection, for `preauth_timeout_s`, before checking the token, and each stream
buffers at most about `READ_CHUNK` beyond what was parsed. A run's files in are read only once it has its
slot, so their memory is bounded by `max_concurrent` runs; at most `max_concurrent` runs execute at once,
further requests wait up to `queue_timeout_s`, and beyond `4 * max_concurrent` waiting the answer is `busy`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import logging
import os
import socket
import stat
from typing import Any

from core_tools.errors import ToolError
from core_tools.sandbox.executor import LocalExecutor, describe
from core_tools.sandbox.protocol import (
    MAX_FILES_IN,
    MAX_REQUEST_BYTES,
    PREAUTH_MAX_BYTES,
    PROTOCOL_VERSION,
    READ_CHUNK,
    LineTooLong,
    declared_files,
    decode,
    encode,
    failure,
    read_frame,
    read_line,
    write_frames,
)
from core_tools.sandbox.runs import (
    ClientGone,
    Progress,
    Refusal,
    Reply,
    files_out_limits,
    result_reply,
    unless_client_leaves,
)

log = logging.getLogger("core_tools.sandbox.service")  # the service's one logger, whichever module logs

_MIB = 1024 * 1024
DEFAULT_MAX_FILES_IN_MB = 32  # all files in of one run together
READ_REQUEST_TIMEOUT_S = 30.0  # a client that connects and says nothing is dropped after this
PREAUTH_TIMEOUT_S = 10.0  # a token service waits this long for the token line
SHUTDOWN_GRACE_S = 10.0  # on SIGTERM, how long running code may finish before it is killed


def default_max_connections(max_concurrent: int) -> int:
    """Room for every run and every waiting request (4 per slot), and some to spare for hellos."""
    return 5 * max_concurrent + 24


class _Connection:
    """One accepted connection, until it is closed."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self.dropped = False  # closed by the service to make room: nothing more is written to it


class SandboxService:
    """Serves one `LocalExecutor` on a unix socket and/or TCP with bounded connections and concurrency."""

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
        max_files_in_bytes: int = DEFAULT_MAX_FILES_IN_MB * _MIB,
        max_connections: int | None = None,
        preauth_timeout_s: float = PREAUTH_TIMEOUT_S,
        request_timeout_s: float = READ_REQUEST_TIMEOUT_S,
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
        self.max_files_in_bytes = max_files_in_bytes
        self.socket_mode = socket_mode
        self.max_waiting = 4 * max_concurrent
        self.max_connections = max_connections or default_max_connections(max_concurrent)
        self.preauth_timeout_s = preauth_timeout_s
        self.request_timeout_s = request_timeout_s
        self._slots = asyncio.Semaphore(max_concurrent)
        self._waiting = 0
        self._running = 0
        self._started = 0
        self._refused = 0  # connections refused, closed to make room, or cut off before the token
        # Accepted connections whose request (or token) has not come yet, oldest first; and the others.
        self._pending: dict[_Connection, None] = {}
        self._active: set[_Connection] = set()
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
        """The answer to `hello`: what this service runs, its limits and its counters."""
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
            "limits": dataclasses.asdict(limits),  # what every run here gets: the client follows these
            "queue_timeout_s": self.queue_timeout_s,
            "max_concurrent": self.max_concurrent,
            "max_request_bytes": self.max_request_bytes,
            "max_files_in_bytes": self.max_files_in_bytes,
            "max_files_in": MAX_FILES_IN,
            "max_connections": self.max_connections,
            "connections": len(self._pending) + len(self._active),
            "refused_connections": self._refused,
            "running": self._running,
            "waiting": self._waiting,
            "started": self._started,
        }

    async def start(self) -> None:
        """Remove a stale socket, bind, and make the socket reachable by the bot's user; listen on TCP."""
        # The streams' buffer limit is small: a line is read in pieces of it (protocol.read_line), so what
        # an unauthenticated connection makes this process hold stays about this size.
        if self.listen is not None:
            host, port = self.listen
            self._tcp = await asyncio.start_server(
                self._on_connect, host, port, limit=READ_CHUNK, reuse_address=True
            )
        if not self.socket_path:
            return
        _remove_stale_socket(self.socket_path)
        directory = os.path.dirname(self.socket_path)
        if directory:
            os.makedirs(directory, exist_ok=True)
        self._server = await asyncio.start_unix_server(
            self._on_connect, path=self.socket_path, limit=READ_CHUNK
        )
        os.chmod(self.socket_path, self.socket_mode)

    async def stop(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
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

    # --- connections ---------------------------------------------------------------------------------

    def _admit(self, conn: _Connection) -> bool:
        """Hold a new connection if there is room, making room by closing the oldest one that has not sent
        its request; False when every held connection is a client's request."""
        if len(self._pending) + len(self._active) >= self.max_connections:
            if not self._pending:
                return False
            oldest = next(iter(self._pending))
            self._drop(oldest)
        self._pending[conn] = None
        return True

    def _drop(self, conn: _Connection) -> None:
        """Close a connection that sent nothing usable yet, saying why (its handler then ends quietly)."""
        del self._pending[conn]
        conn.dropped = True
        self._refused += 1
        why = (
            f"closed to make room: the sandbox service holds at most {self.max_connections} connections, "
            "and this one had not sent its request"
        )
        with contextlib.suppress(ConnectionError, RuntimeError):
            conn.writer.write(encode(failure("busy", why)))
        conn.writer.close()  # its reader sees the end of the stream: the handler wakes and returns

    def _activate(self, conn: _Connection) -> None:
        """The connection proved itself (its token, or a whole request line): it is no longer dropped."""
        self._pending.pop(conn, None)
        self._active.add(conn)

    async def _on_connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = _Connection(writer)
        if not self._admit(conn):
            self._refused += 1
            with contextlib.suppress(ConnectionError, RuntimeError):
                writer.write(
                    encode(
                        failure(
                            "busy",
                            f"the sandbox service holds {self.max_connections} connections, its limit; "
                            "try again later",
                        )
                    )
                )
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            return
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        try:
            try:
                answer, files = await self._answer(reader, writer, conn)
            except (
                ConnectionError
            ):  # the client left while told something (its token's answer): nobody to answer
                return
            except Exception as exc:  # the protocol promises an answer line for any failure
                log.exception("request failed inside the sandbox service")
                answer = failure("internal", f"internal error in the sandbox service: {type(exc).__name__}")
                files = []
            if not conn.dropped:
                with contextlib.suppress(ConnectionError):
                    writer.write(encode(answer))
                    await writer.drain()
                    await write_frames(writer, files)
        except asyncio.CancelledError:
            with contextlib.suppress(ConnectionError, RuntimeError):
                writer.write(encode(failure("internal", "the sandbox service is shutting down")))
            raise
        finally:
            self._pending.pop(conn, None)
            self._active.discard(conn)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
            if task is not None:
                self._handlers.discard(task)

    # --- requests ------------------------------------------------------------------------------------

    async def _answer(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, conn: _Connection
    ) -> Reply:
        """Read the request (after the token, on a token service) and produce the answer; never raises for a
        bad request."""
        try:
            if self.token is not None:
                request = await self._read_request(reader, PREAUTH_MAX_BYTES, self.preauth_timeout_s, True)
                given = request.get("token")
                if not isinstance(given, str) or not hmac.compare_digest(given.encode(), self.token.encode()):
                    self._refused += 1
                    raise Refusal("unauthorized", "wrong or missing token: set the same CODE_SANDBOX_TOKEN")
            else:
                request = await self._read_request(
                    reader, self.max_request_bytes, self.request_timeout_s, False
                )
            self._activate(conn)
            if request.get("op") == "auth":  # the request follows, with the full limits
                writer.write(encode({"ok": True, "op": "auth"}))
                await writer.drain()
                request = await self._read_request(
                    reader, self.max_request_bytes, self.request_timeout_s, False
                )
            op = request.get("op")
            if op == "hello":
                return self.hello(), []
            if op == "run":
                return await self._run(request, reader, writer if request.get("ack") is True else None)
            raise Refusal("bad_request", f"unknown op {op!r}; expected hello or run")
        except Refusal as refusal:
            return failure(refusal.kind, refusal.error), []

    async def _read_request(
        self, reader: asyncio.StreamReader, limit: int, wait_s: float, before_token: bool
    ) -> dict[str, Any]:
        """One request line as a JSON object; Refusal for anything else."""
        try:
            line = await read_line(reader, limit, wait_s)
        except LineTooLong:
            if before_token:
                self._refused += 1
                raise Refusal(
                    "unauthorized",
                    f'no token within the first {limit} bytes: send {{"op": "auth", "token": ...}} first',
                ) from None
            raise Refusal(
                "too_large", f"request larger than the sandbox service's limit of {limit} bytes"
            ) from None
        except asyncio.IncompleteReadError:
            raise Refusal("bad_request", "the request did not end with a newline") from None
        except TimeoutError:
            raise Refusal("bad_request", "no request line received in time") from None
        try:
            return decode(line)
        except ValueError as exc:
            raise Refusal("bad_request", f"the request is unusable: {exc}") from None

    async def _run(
        self, request: dict[str, Any], reader: asyncio.StreamReader, ack: asyncio.StreamWriter | None = None
    ) -> Reply:
        """Validate a run request, wait for a slot, take its files, say it started (when asked), run it
        unless the client leaves."""
        code = request.get("code")
        language = request.get("language", "python")
        timeout_s = request.get("timeout_s")
        if not isinstance(code, str) or not isinstance(language, str):
            raise Refusal("bad_request", "run needs `code` and `language` as strings")
        if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float)):
            raise Refusal("bad_request", "`timeout_s` must be a number or null")
        files_out = files_out_limits(request.get("files_out"))
        try:
            declared = declared_files(
                request.get("files_in") or [],
                max_files=MAX_FILES_IN,
                max_bytes=self.max_files_in_bytes,
                max_total=self.max_files_in_bytes,
            )
        except TypeError as exc:
            raise Refusal("bad_request", f"bad files_in: {exc}") from None
        except ValueError as exc:
            raise Refusal("too_large", f"files_in over the sandbox service's limits: {exc}") from None
        total_in = sum(size for _name, size in declared)
        if self._waiting >= self.max_waiting:
            await self._discard(reader, total_in)
            raise Refusal("busy", f"the code sandbox is busy ({self._waiting} runs waiting); try again later")
        self._waiting += 1
        try:
            await asyncio.wait_for(self._slots.acquire(), self.queue_timeout_s)
        except TimeoutError:
            await self._discard(reader, total_in)
            raise Refusal(
                "busy",
                f"the code sandbox is busy: no free slot within {self.queue_timeout_s:g} s "
                f"({self.max_concurrent} runs at once); try again later",
            ) from None
        finally:
            self._waiting -= 1
        self._running += 1
        output = Progress() if ack is not None and request.get("progress") is True else None
        reporter: asyncio.Task[None] | None = None
        try:
            # Read only now: what waiting requests hold is their line, not their files.
            try:
                files_in = {
                    name: await read_frame(reader, size, self.request_timeout_s) for name, size in declared
                }
            except (asyncio.IncompleteReadError, TimeoutError, ConnectionError):
                raise Refusal("bad_request", "the files of the request did not arrive whole") from None
            self._started += 1
            if ack is not None:
                # From here the code may run: a client that sees this line must not send it elsewhere.
                ack.write(encode({"started": True}))
                await ack.drain()
                if output is not None:
                    reporter = asyncio.create_task(output.report(ack))
            result = await unless_client_leaves(
                self.executor.run(
                    code,
                    language,
                    None if timeout_s is None else float(timeout_s),
                    files_in=files_in or None,
                    files_out=files_out,
                    on_output=output.see if output is not None else None,
                ),
                reader,
            )
        except ClientGone:
            log.info("the client closed the connection mid-run (a stopped turn): the run was killed")
            raise Refusal("internal", "the client closed the connection; the run was killed") from None
        except ToolError as exc:
            raise Refusal("tool_error", str(exc)) from None
        except Refusal:
            raise
        except Exception as exc:  # the service must keep serving whatever one run does
            log.exception("run failed inside the sandbox service")
            raise Refusal(
                "internal", f"internal error in the sandbox service: {type(exc).__name__}: {exc}"
            ) from None
        finally:
            if reporter is not None:  # no progress line may follow (or split) the answer
                reporter.cancel()
                await asyncio.wait({reporter})
            self._running -= 1
            self._slots.release()
        return result_reply(result)

    async def _discard(self, reader: asyncio.StreamReader, size: int) -> None:
        """Read and drop a refused request's files: the client, still sending them, then reads the answer."""
        with contextlib.suppress(asyncio.IncompleteReadError, TimeoutError, ConnectionError):
            await read_frame(reader, size, self.request_timeout_s, keep=False)


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
