"""The Bot API's HTTP client: python-telegram-bot's request interface on aiohttp instead of httpx.

Every answer costs a few Bot API calls (typing, the reply, its edits). PTB's default client (httpx over
httpcore) scans its whole connection pool on every request and response, so its CPU per call grows with the
calls in flight: with 50 chats answered at once it was the largest share of the bot's work
(bench/bench_chat.py's profile). aiohttp keeps its pool in a dict and parses in C; the openai client uses it
already (core_tools/llm/). The timeouts keep PTB's defaults (HTTPXRequest's): connect, read, the wait for a
free connection, and for an upload its write time (aiohttp has no write timeout: the whole upload is bounded).
`PollingRequest` is the one getUpdates goes through: it notes each poll's outcome for the long poll's
watchdog (bot/adapter/watchdog.py).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from typing import Any

import aiohttp
from telegram.error import NetworkError, TimedOut
from telegram.request import BaseRequest, RequestData

# HTTPXRequest's defaults (python-telegram-bot 22).
CONNECT_S = 5.0
READ_S = 5.0
POOL_S = 1.0
MEDIA_WRITE_S = 20.0
POOL_SIZE = 256


# PTB marks a timeout the caller did not pass with an instance of its (private) DefaultValue class.
_NOT_PASSED = type(BaseRequest.DEFAULT_NONE)


def _seconds(value: Any, default: float | None) -> float | None:
    return default if isinstance(value, _NOT_PASSED) else value


class AiohttpRequest(BaseRequest):
    """PTB's BaseRequest on one aiohttp session (one per request object, as HTTPXRequest has)."""

    __slots__ = ("_connect", "_pool", "_pool_size", "_read", "_session")

    def __init__(
        self,
        *,
        connection_pool_size: int = POOL_SIZE,
        read_timeout: float | None = READ_S,
        connect_timeout: float | None = CONNECT_S,
        pool_timeout: float | None = POOL_S,
    ) -> None:
        self._pool_size = connection_pool_size
        self._read = read_timeout
        self._connect = connect_timeout
        self._pool = pool_timeout
        self._session: aiohttp.ClientSession | None = None

    @property
    def read_timeout(self) -> float | None:
        """The default read timeout in seconds."""
        return self._read

    async def initialize(self) -> None:
        """Open the session (again after a shutdown)."""
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=self._pool_size))

    async def shutdown(self) -> None:
        """Close the session and its connections."""
        if self._session is not None and not self._session.closed:
            await self._session.close()

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: Any = BaseRequest.DEFAULT_NONE,
        write_timeout: Any = BaseRequest.DEFAULT_NONE,
        connect_timeout: Any = BaseRequest.DEFAULT_NONE,
        pool_timeout: Any = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        """Send one request; TimedOut or NetworkError as PTB expects them."""
        session = self._session
        if session is None or session.closed:
            raise RuntimeError("This AiohttpRequest is not initialized!")
        files = request_data.multipart_data if request_data is not None else None
        fields = request_data.json_parameters if request_data is not None else None
        read = _seconds(read_timeout, self._read)
        connect = _seconds(connect_timeout, self._connect)
        pool = _seconds(pool_timeout, self._pool)
        body: Any = fields
        if files:
            form = aiohttp.FormData()
            for name, value in (fields or {}).items():
                form.add_field(name, value)
            for name, (filename, content, mime) in files.items():
                form.add_field(name, content, filename=filename, content_type=mime)
            body = form
        # aiohttp has no write timeout: an upload is bounded as a whole (its write time, as PTB's media write
        # timeout, plus the rest); other requests by each read, like httpx's.
        write = _seconds(write_timeout, MEDIA_WRITE_S) if files else None
        total = None if write is None or read is None else write + read + (connect or 0) + (pool or 0)
        timeout = aiohttp.ClientTimeout(
            total=total,
            connect=None if connect is None or pool is None else connect + pool,
            sock_connect=connect,
            sock_read=read,
        )
        try:
            async with session.request(
                method, url, data=body, headers={"User-Agent": self.USER_AGENT}, timeout=timeout
            ) as response:
                return response.status, await response.read()
        except TimeoutError as exc:
            raise TimedOut from exc
        except aiohttp.ClientError as exc:
            raise NetworkError(f"aiohttp.{type(exc).__name__}: {exc}") from exc


class PollingRequest(AiohttpRequest):
    """The getUpdates request: records when a getUpdates last succeeded and why the last one failed."""

    __slots__ = ("clock", "count_next", "counted", "failures", "last_failure", "last_ok")

    def __init__(self, *, clock: Callable[[], float] = time.monotonic, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.clock = clock
        self.last_ok = clock()
        self.failures = 0
        self.last_failure = ""
        self.count_next = False  # the watchdog asks: how many updates the next successful poll brings
        self.counted: int | None = None

    async def reset(self) -> None:
        """A fresh session (a fresh connection pool); the old one's requests are aborted."""
        old = self._session
        self._session = None
        await self.initialize()
        if old is not None and not old.closed:
            await old.close()

    async def do_request(
        self,
        url: str,
        method: str,
        request_data: RequestData | None = None,
        read_timeout: Any = BaseRequest.DEFAULT_NONE,
        write_timeout: Any = BaseRequest.DEFAULT_NONE,
        connect_timeout: Any = BaseRequest.DEFAULT_NONE,
        pool_timeout: Any = BaseRequest.DEFAULT_NONE,
    ) -> tuple[int, bytes]:
        """AiohttpRequest's request, its outcome noted when it is a getUpdates."""
        polls = url.endswith("/getUpdates")
        try:
            status, body = await super().do_request(
                url, method, request_data, read_timeout, write_timeout, connect_timeout, pool_timeout
            )
        except Exception as exc:
            if polls:
                self.failures += 1
                self.last_failure = type(exc).__name__
            raise
        if polls:
            if status == 200:
                if self.count_next:
                    self.count_next = False
                    self.counted = _update_count(body)
                self.last_ok = self.clock()
            else:
                self.failures += 1
                self.last_failure = f"HTTP {status}"
        return status, body


def _update_count(body: bytes) -> int:
    with contextlib.suppress(ValueError, TypeError, KeyError):
        return len(json.loads(body)["result"])
    return 0
