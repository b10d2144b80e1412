"""The app's server against idle and slow clients (issue 31 §9), over real sockets on 127.0.0.1 against the
real bot: connections over the caps get 503 with Retry-After at once, the owner still gets in, idle and
slow connections are closed after the client timeout, and the log says a refusal once plus one count.

Several client addresses are 127.0.0.2, 127.0.0.3, ... (all of 127/8 is this machine's on Linux).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

import pytest

from bot.webapp.limits import LogThrottle
from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, running_bot
from tests.webapp.client import AppClient, init_data

pytestmark = pytest.mark.slow  # bot processes

WAIT = 30.0  # a generous bound for what the server does at once (or after a one-second timeout)
Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _open(port: int, source: str) -> Conn:
    return await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))


async def _head(reader: asyncio.StreamReader) -> bytes:
    return await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=WAIT)


async def _status_of_a_request(conn: Conn, auth: str) -> int:
    """Send a request on a connection opened earlier; the status it gets (the head of the first answer)."""
    reader, writer = conn
    writer.write(f"GET /api/me HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: tma {auth}\r\n\r\n".encode())
    await writer.drain()
    head = await _head(reader)
    return int(head.split(b" ", 2)[1])


def _lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


async def test_connections_over_the_caps_get_503_at_once_and_the_owner_still_gets_in(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.webapp")
    app: dict[str, Any] = {
        "webapp_listen": "127.0.0.1:0",
        "webapp_client_timeout_s": 600,  # nothing times out during this test
        "webapp_max_connections": 30,
        "webapp_max_connections_per_address": 20,
    }
    async with running_bot(tmp_path, tg, llm, **app) as h:
        webapp = h.webapp
        assert webapp is not None
        port = webapp.port
        # One address opens 30 idle connections: 20 are kept, 10 are answered 503 at once (and closed).
        first = [await _open(port, "127.0.0.2") for _ in range(30)]
        # The owner, from another address, still gets in.
        async with AppClient(h.app_url, init_data(OWNER)) as owner:
            assert (await owner.ok("GET", "/api/me"))["user"]["id"] == OWNER
        # A second address fills the total of 30 (20 + the owner's + 9 or 10 of these).
        second = [await _open(port, "127.0.0.3") for _ in range(15)]
        # Over the total: a new client (the owner's next page) gets a clear 503, not a hang.
        reader, writer = await _open(port, "127.0.0.1")
        head = await _head(reader)
        assert head.startswith(b"HTTP/1.1 503"), head
        assert b"Retry-After: 600" in head
        body = await asyncio.wait_for(reader.read(), timeout=WAIT)  # then the server closes it
        assert b"too many open connections" in body and b'"retry_after": 600' in body
        writer.close()

        friend = init_data(FRIEND)
        statuses = [await _status_of_a_request(c, friend) for c in first]
        assert sorted(statuses) == [200] * 20 + [503] * 10, statuses  # the first 20 were kept
        statuses = [await _status_of_a_request(c, friend) for c in second]
        assert set(statuses) == {200, 503} and 9 <= statuses.count(200) <= 10, statuses

        # The second address leaves: the owner gets in again (as soon as the server has seen them go).
        for _, w in second:
            w.close()

        async def owner_gets_in() -> None:
            while True:
                async with AppClient(h.app_url, init_data(OWNER)) as owner:
                    status, _ = await owner.call("GET", "/api/me")
                if status == 200:
                    return
                assert status == 503
                await asyncio.sleep(0.05)

        await asyncio.wait_for(owner_gets_in(), timeout=WAIT)
        for _, w in first:
            w.close()
        refused_lines = _lines(caplog, "refused a connection")
        assert len(refused_lines) == 1, refused_lines  # 16 or more refusals, one line
        assert "127.0.0.2" in refused_lines[0] and "WEBAPP_MAX_CONNECTIONS_PER_ADDRESS" in refused_lines[0]
    # At the stop, the count of the rest: one line.
    summaries = _lines(caplog, "refused connections (over its caps):")
    assert len(summaries) == 1 and int(summaries[0].split(": ")[1].split()[0]) >= 15, summaries


async def test_idle_and_slow_connections_are_closed_after_the_client_timeout(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    app: dict[str, Any] = {"webapp_listen": "127.0.0.1:0", "webapp_client_timeout_s": 1.0}
    async with running_bot(tmp_path, tg, llm, **app) as h:
        webapp = h.webapp
        assert webapp is not None
        port = webapp.port
        idle = [await _open(port, "127.0.0.2") for _ in range(5)]
        # The head of a request, never finished (a byte now and then does not keep it open).
        partial = await _open(port, "127.0.0.2")
        partial[1].write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        # A body announced and never sent whole.
        slow = await _open(port, "127.0.0.2")
        slow[1].write(
            b"PATCH /api/memories/1 HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b'Content-Length: 100\r\n\r\n{"content": '
        )
        # A connection kept open after its answer.
        kept = await _open(port, "127.0.0.2")
        kept[1].write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        head = await _head(kept[0])
        assert head.startswith(b"HTTP/1.1 200") and b"Connection: close" not in head
        length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        await kept[0].readexactly(length)

        # Each is closed by the server: end of file (the slow body first gets 408).
        for reader, _ in [*idle, partial, kept]:
            assert await asyncio.wait_for(reader.read(), timeout=WAIT) == b""
        answer = await asyncio.wait_for(slow[0].read(), timeout=WAIT)
        assert answer.startswith(b"HTTP/1.1 408") and b"did not arrive within 1 s" in answer, answer
        # And the app answers as ever.
        async with AppClient(h.app_url, init_data(OWNER)) as owner:
            assert (await owner.ok("GET", "/api/me"))["user"]["id"] == OWNER
        for _, w in [*idle, partial, slow, kept]:
            w.close()


async def test_refused_launch_data_is_logged_once_then_counted(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.webapp")
    async with running_bot(tmp_path, tg, llm, webapp_listen="127.0.0.1:0") as h:
        async with AppClient(h.app_url, "user=forged&hash=00") as stranger:
            for _ in range(100):
                assert (await stranger.call("GET", "/api/me"))[0] == 401
        assert len(_lines(caplog, "app request refused")) == 1
    assert _lines(caplog, "app requests refused: 99 more in the last 60 s") != []


async def test_the_throttle_logs_one_count_per_interval_and_nothing_for_a_quiet_one(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("tests.throttle")
    caplog.set_level(logging.INFO, logger="tests.throttle")
    throttle = LogThrottle(logger, interval_s=0.01)
    for i in range(5):
        throttle.note("k", "refusals", "refused %d", i)
    assert [r.getMessage() for r in caplog.records] == ["refused 0"]

    async def logged(n: int) -> None:
        while len(caplog.records) < n:
            await asyncio.sleep(0.01)

    await asyncio.wait_for(logged(2), timeout=WAIT)
    assert caplog.records[1].getMessage() == "refusals: 4 more in the last 0.01 s"
    # A quiet interval ends the window: the next one is logged at once, in full.
    while "k" in throttle._open:
        await asyncio.sleep(0.01)
    throttle.note("k", "refusals", "refused %d", 9)
    assert caplog.records[-1].getMessage() == "refused 9"
    throttle.close()
