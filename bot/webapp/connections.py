"""The app's listening socket, with a cap on open connections in all and from one address.

aiohttp closes a connection that sends no complete request within its keep-alive timeout (counted from the
connection's start or the end of its last answer, not moved on by a trickle of header bytes), but it has no
bound on how many connections are open: enough idle ones take all of the process's file descriptors, and
then the app, the bot's downloads and `/export` fail for everyone. So the socket is this module's: a
connection under both caps is handed to aiohttp's handler (the transport's protocol is switched to it before
a byte is read); one over a cap gets `503` with `Retry-After` at once and is closed. Its request, if it sends
one, is read and dropped until it closes (closing a socket with unread data would reset the connection and
lose the answer), for at most the client timeout, and never for more refused connections than the cap
itself (past that they are closed unanswered): the server holds at most twice WEBAPP_MAX_CONNECTIONS
descriptors. The per-address cap counts an IPv6 client by its /64 (one machine's usual share). Refusals are
logged through a LogThrottle: one line, then one count per interval.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import math
from collections.abc import Callable, Collection

from bot.webapp.limits import LogThrottle


def client_address(transport: asyncio.BaseTransport) -> str:
    """What the per-address cap counts by: the IPv4 address, or the IPv6 address's /64."""
    peer = transport.get_extra_info("peername")
    if not isinstance(peer, tuple) or not peer:
        return "unknown"
    try:
        ip = ipaddress.ip_address(str(peer[0]).split("%")[0])
    except ValueError:
        return str(peer[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network(f"{ip}/64", strict=False))
    return str(ip)


def refusal(retry_after_s: float, why: str) -> bytes:
    """The whole 503 answer to an over-cap connection."""
    wait = max(1, math.ceil(retry_after_s))
    body = json.dumps({"error": f"{why}: try again in {wait} s", "retry_after": wait}).encode()
    head = (
        "HTTP/1.1 503 Service Unavailable\r\n"
        "Content-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n"
        f"Retry-After: {wait}\r\n"
        "Cache-Control: no-store\r\n"
        "X-Content-Type-Options: nosniff\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


class Listener:
    """Accepts connections for an aiohttp server (`factory`: `runner.server`, whose `connections` are the
    open ones) under `max_total` open connections and `max_per_address` from one remote address."""

    def __init__(
        self,
        factory: Callable[[], asyncio.Protocol],
        connections: Callable[[], Collection[object]],
        *,
        max_total: int,
        max_per_address: int,
        retry_after_s: float,
        refusals: LogThrottle,
    ) -> None:
        self.factory = factory
        self.connections = connections
        self.max_total = max_total
        self.max_per_address = max_per_address
        self.retry_after_s = retry_after_s
        self.refusals = refusals
        self._admitted: dict[object, str] = {}  # aiohttp's handler -> the remote address
        self._refused: set[_Gate] = set()  # refused connections still reading their request
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen on host:port; the port listened on (a free one for port 0)."""
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Gate(self), host or None, port, reuse_address=True)
        return int(self._server.sockets[0].getsockname()[1])

    def close(self) -> None:
        """Stop accepting; refused connections are closed at once (aiohttp's runner closes its own)."""
        if self._server is not None:
            self._server.close()
            self._server = None
        for gate in list(self._refused):
            gate.abort()
        self.refusals.close()

    def open_counts(self, address: str) -> tuple[int, int]:
        """(open connections in all, open from `address`) among those handed to aiohttp."""
        live = set(self.connections())
        if len(self._admitted) > len(live) or any(h not in live for h in self._admitted):
            self._admitted = {h: a for h, a in self._admitted.items() if h in live}
        return len(live), sum(1 for a in self._admitted.values() if a == address)

    def over_cap(self, address: str) -> tuple[str, str] | None:
        """Why a new connection from `address` is refused (for the client, for the log), or None."""
        total, mine = self.open_counts(address)
        if total >= self.max_total:
            return "the app's server has too many open connections", f"{total} open in all"
        if mine >= self.max_per_address:
            return "too many open connections from your address", f"{mine} open from this address"
        return None

    def arrived(self, gate: _Gate, transport: asyncio.Transport) -> None:
        """A new connection: to aiohttp's handler, or refused."""
        address = client_address(transport)
        why = self.over_cap(address)
        if why is None:
            handler = self.factory()
            self._admitted[handler] = address
            transport.set_protocol(handler)
            handler.connection_made(transport)
            return
        self.refusals.note(
            "connections",
            "the app's web server refused connections (over its caps)",
            "the app's web server refused a connection from %s: %s (WEBAPP_MAX_CONNECTIONS=%d, "
            "WEBAPP_MAX_CONNECTIONS_PER_ADDRESS=%d); the next ones are counted",
            address,
            why[1],
            self.max_total,
            self.max_per_address,
        )
        if len(self._refused) >= self.max_total:
            transport.abort()  # a flood of them: no answer, no descriptor held
            return
        self._refused.add(gate)
        gate.refuse(transport, refusal(self.retry_after_s, why[0]), self.retry_after_s)

    def forget(self, gate: _Gate) -> None:
        self._refused.discard(gate)


class _Gate(asyncio.Protocol):
    """A new connection's first protocol: it hands the connection on, or answers 503 and drains it."""

    def __init__(self, listener: Listener) -> None:
        self.listener = listener
        self.transport: asyncio.Transport | None = None
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.listener.arrived(self, transport)

    def refuse(self, transport: asyncio.Transport, answer: bytes, linger_s: float) -> None:
        """Answer, end the sending side, and read what comes until the client closes, for `linger_s`."""
        self.transport = transport
        transport.write(answer)
        if transport.can_write_eof():
            transport.write_eof()
        self.timer = asyncio.get_running_loop().call_later(linger_s, self.close)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()  # what the client sent is read: no reset, the answer stays readable

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    def data_received(self, data: bytes) -> None:
        """The refused connection's request: dropped."""

    def eof_received(self) -> bool:
        return False  # the client is done: close

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.transport = None
        self.listener.forget(self)
