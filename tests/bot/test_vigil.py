"""The watchdog's decisions (bot/runtime/vigil/conditions.py) on an injected clock, its loop's logging,
recording, alerting, telling and health file (monitor.py) on a real database, and the doctor's lines about
it (bot/process/vigil_checks.py) on both databases."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiohttp import web
from sqlalchemy import Engine

from bot.config.settings import Settings
from bot.process.vigil_checks import check_process, check_watchdog
from bot.runtime.vigil import Condition, Deliveries, Vigil
from bot.runtime.vigil.alert import AlertWebhook
from bot.runtime.vigil.conditions import (
    Change,
    Pending,
    PingWatch,
    Reading,
    SendingWatch,
    Tracker,
    WebhookWatch,
    lease_lapsed,
    undelivered,
)
from bot.runtime.vigil.health import judge, stale_after_s
from bot.runtime.vigil.probes import (
    LEASE,
    SANDBOX,
    lease_condition,
    ping,
    sandbox_addresses,
    sandbox_condition,
)
from db.migrate import upgrade
from db.runtime import RuntimeStore
from db.watchdog_events import WatchdogEvents
from tests.support.databases import both_databases

db_kind = both_databases()  # the watchdog_events table and the doctor's query on each database


# ---------------------------------------------------------------------- the decisions


def test_a_condition_begins_once_after_its_threshold_and_ends_once() -> None:
    t = Tracker("x", after_s=5)
    assert t.observe(1, None) is Change.NONE
    assert t.observe(4, Reading(0, "why")) is Change.NONE  # wrong for 4 s: not yet
    assert t.observe(5, Reading(0, "why")) is Change.BEGAN
    assert (t.since, t.cause) == (0, "why")
    assert t.observe(9, Reading(0, "still")) is Change.NONE and t.cause == "still"
    assert t.observe(10, None) is Change.ENDED and t.ended_at == 10
    assert t.observe(11, None) is Change.NONE


def test_answers_count_only_once_their_sends_failed_past_the_threshold() -> None:
    assert undelivered(1000, [], 120) is None  # an idle bot
    waiting = [Pending(1, 950, "NetworkError: Bad Gateway"), Pending(2, 800, "TimedOut: timed out")]
    assert undelivered(1000, waiting[:1], 120) is None  # failing for 50 s
    reading = undelivered(1000, waiting, 120)
    assert reading is not None and reading.since == 800
    assert reading.cause.startswith("1 answer(s) to 1 chat(s) not delivered; the last error: TimedOut")
    assert undelivered(1000, waiting, 0) is None  # off


def test_deliveries_keep_the_first_failure_and_count_the_late_ones() -> None:
    now = [100.0]
    d = Deliveries(clock=lambda: now[0])
    token = d.failing(7, "a")
    now[0] = 130.0
    assert d.failing(7, "b", token) == token
    assert d.pending() == [Pending(7, 100.0, "b")]
    other = d.failing(8, "c")
    d.done(token, delivered=True)
    d.done(other, delivered=False)  # given up: not a late delivery
    assert d.pending() == [] and d.take_late() == 1 and d.take_late() == 0


def test_the_lease_lapses_when_the_heartbeat_is_not_renewed_for_a_whole_lease() -> None:
    assert lease_lapsed(now=114, renewed_at=100, lease_s=15, error="") is None
    reading = lease_lapsed(now=116, renewed_at=100, lease_s=15, error="OperationalError")
    assert reading is not None and reading.since == 100 and "OperationalError" in reading.cause


def test_a_firing_counts_as_left_in_sending_only_after_the_threshold() -> None:
    watch = SendingWatch(threshold_s=300)
    assert watch.observe(0, [1, 2]) == (None, [])
    assert watch.observe(200, [2, 3]) == (None, [])  # 1 was sent meanwhile: forgotten
    reading, stuck = watch.observe(300, [2, 3])
    assert stuck == [2] and reading is not None and reading.since == 0 and "#2" in reading.cause
    reading, stuck = watch.observe(500, [2, 3])
    assert stuck == [2, 3]
    assert watch.observe(501, []) == (None, [])


def test_a_service_is_unreachable_from_its_first_failed_ping_of_a_streak() -> None:
    watch = PingWatch()
    assert watch.observe(0, []) is None
    first = watch.observe(60, ["tcp://sandbox:7000: ConnectionRefusedError"])
    assert first is not None and first.since == 60
    again = watch.observe(120, ["tcp://sandbox:7000: ConnectionRefusedError"])
    assert again is not None and again.since == 60
    assert watch.observe(180, []) is None


def test_the_webhook_stalls_only_while_updates_wait_and_none_arrives() -> None:
    watch = WebhookWatch()
    for t in range(0, 600, 60):  # idle: nothing waits at Telegram
        assert watch.observe(t, pending=0, arrived=0, last_error=None, error_age_s=None) is None
    watch = WebhookWatch()
    assert watch.observe(0, 3, 5, None, None) is None  # first look
    assert watch.observe(60, 4, 9, None, None) is None  # updates keep arriving: Telegram delivers
    stalled = watch.observe(120, 6, 9, "Connection refused", 30.0)
    assert stalled is not None and stalled.since == 120
    assert "6 update(s) wait" in stalled.cause and "Connection refused, 30 s ago" in stalled.cause
    later = watch.observe(180, 9, 9, "Connection refused", 10.0)
    assert later is not None and later.since == 120
    assert watch.observe(240, 0, 12, None, None) is None


def test_the_health_file_verdicts() -> None:
    assert stale_after_s(10) == 35
    assert not judge(None, None, 35).ok
    assert judge("ok\n", 3, 35).ok
    stale = judge("ok\n", 36, 35)
    assert not stale.ok and "stuck" in stale.detail
    bad = judge("unhealthy: polling stalled since 14:02 (HTTP 502)\n", 3, 35)
    assert not bad.ok and bad.detail == "unhealthy: polling stalled since 14:02 (HTTP 502)"


# ---------------------------------------------------------------------- the loop


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def events_engine(engine: Engine, database_url: str) -> Engine:
    upgrade(database_url)
    return engine


async def test_the_loop_logs_records_alerts_tells_once_and_writes_the_health_file(
    tmp_path: Path, events_engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.runtime.vigil")
    clock = Clock()
    state: dict[str, Reading | None] = {"r": None}

    async def probe(now: float) -> Reading | None:
        return state["r"]

    told: list[str] = []
    telegram_down = [True]

    async def tell(text: str) -> None:
        if telegram_down[0]:
            raise ConnectionError("still down")
        told.append(text)

    received: list[dict[str, Any]] = []

    async def hook(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.json_response({"ok": True})

    async with serving(hook) as base:
        health = tmp_path / "run" / "health"
        events = WatchdogEvents(events_engine)
        vigil = Vigil(
            tick_s=10,
            process="host-abc",
            events=events,
            health_file=health,
            tell=tell,
            alert=AlertWebhook(f"{base}/hooks/T0KEN-s3cret"),
            secrets=["s3cret-value"],
            clock=clock,
            wall=lambda: clock.now + 1_700_000_000,
        )
        vigil.add(Condition("sends failing", probe, after_s=30))
        await vigil.tick()
        assert health.read_text().splitlines()[0] == "ok"
        # The process's own pid: the container's health check (deploy/healthcheck --file) stops it when stuck.
        assert f"pid {os.getpid()}" in health.read_text().splitlines()
        state["r"] = Reading(1000, "HTTP 502 and s3cret-value")
        clock.now = 1029
        assert (await vigil.tick())["sends failing"] is Change.NONE
        clock.now = 1030
        assert (await vigil.tick())["sends failing"] is Change.BEGAN
        for _ in range(3):
            clock.now += 10
            await vigil.tick()
        assert health.read_text().startswith("unhealthy: sends failing since ")
        assert "HTTP 502 and ***" in health.read_text() and "s3cret-value" not in health.read_text()
        (open_event,) = events.recent(now=datetime.fromtimestamp(clock.now + 1_700_000_000, UTC))
        assert open_event.ended is None and open_event.process == "host-abc"
        state["r"] = None
        clock.now += 10
        assert (await vigil.tick())["sends failing"] is Change.ENDED
        assert told == [] and len(vigil.notices) == 1  # Telegram still down: kept
        telegram_down[0] = False
        clock.now += 10
        await vigil.tick()
        clock.now += 10
        await vigil.tick()
        assert len(told) == 1 and "sends failing from" in told[0] and "s3cret-value" not in told[0]
        assert health.read_text().splitlines()[0] == "ok"
        await vigil.aclose()
    onsets = [r for r in caplog.records if "watchdog: sends failing since" in r.getMessage()]
    ends = [r for r in caplog.records if "watchdog: sends failing is over" in r.getMessage()]
    assert len(onsets) == 1 and len(ends) == 1
    assert len(received) == 1 and received[0]["text"].startswith("assistant: sends failing since")
    assert "s3cret-value" not in received[0]["text"]
    (event,) = events.since(datetime(2000, 1, 1, tzinfo=UTC))
    assert event.ended is not None and event.cause == "HTTP 502 and ***"
    assert health.read_text().startswith("unhealthy: the bot stopped")


async def test_an_alert_webhook_that_fails_never_blocks_and_never_logs_its_url(
    caplog: pytest.LogCaptureFixture,
) -> None:
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        await release.wait()  # a hook that never answers in time
        return web.json_response({})

    async with serving(slow) as base:
        alert = AlertWebhook(f"{base}/hooks/T0KEN-s3cret", timeout_s=0.3)
        alert.send("one")
        assert alert.failed == 0 and alert.sent == 0  # sent in the background: the caller went on
        await alert.drain()
        release.set()
    assert alert.failed == 1 and alert.sent == 0
    lines = [r.getMessage() for r in caplog.records if "alert webhook" in r.getMessage()]
    assert lines and all("T0KEN" not in line for line in lines)


class serving:
    """A loopback HTTP server whose every POST goes to `handler`; its base URL."""

    def __init__(self, handler: Any) -> None:
        self.app = web.Application()
        self.app.router.add_post("/{tail:.*}", handler)
        self.runner = web.AppRunner(self.app)

    async def __aenter__(self) -> str:
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return f"http://127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


# ---------------------------------------------------------------------- the doctor


def settings_for(tmp_path: Path, database_url: str, **values: Any) -> Settings:
    return Settings(_env_file=None, openai_api_key="sk-x", database_url=database_url, **values)  # type: ignore[call-arg, arg-type]


def test_the_process_check_reads_the_health_file(tmp_path: Path) -> None:
    health = tmp_path / "bot-health"
    off = settings_for(tmp_path, "sqlite://")
    assert check_process(off) is None  # HEALTH_FILE unset: no line
    s = settings_for(tmp_path, "sqlite://", health_file=str(health), watchdog_tick_s=10)
    missing = check_process(s)
    assert missing is not None and not missing.ok and "no health file" in missing.detail
    health.write_text("ok\nprocess x\n")
    fine = check_process(s)
    assert fine is not None and fine.ok, fine
    old = time.time() - 60
    os.utime(health, (old, old))  # a stuck event loop stops rewriting it
    stale = check_process(s)
    assert stale is not None and not stale.ok and "60 s ago (limit 35 s)" in stale.detail
    health.write_text("unhealthy: answers undelivered since 14:02 (NetworkError: Bad Gateway)\n")
    sick = check_process(s)
    assert sick is not None and not sick.ok and sick.line().startswith("FAIL process: unhealthy: answers")


def test_the_watchdog_check_counts_events_and_fails_while_one_lasts_in_a_live_process(
    tmp_path: Path, events_engine: Engine, database_url: str
) -> None:
    s = settings_for(tmp_path, database_url)
    assert check_watchdog(s).line() == "ok   watchdog: ok now; no event in 7 days"
    events = WatchdogEvents(events_engine)
    now = datetime.now(UTC)
    first = events.begin("polling stalled", "gone-1", now - timedelta(hours=3), "no getUpdates succeeded")
    events.end(first, now - timedelta(hours=3) + timedelta(minutes=7))
    events.begin("answers undelivered", "gone-2", now - timedelta(days=30), "old")  # died during it, long ago
    store = RuntimeStore(events_engine, timedelta(seconds=15))
    store.join("live-1", "space", os.getpid(), "")
    ongoing = events.begin("answers undelivered", "live-1", now - timedelta(minutes=2), "NetworkError: x")
    check = check_watchdog(s)
    assert not check.ok and check.detail.startswith("answers undelivered since ")
    assert "(NetworkError: x)" in check.detail and "2 event(s) in 7 days" in check.detail
    events.end(ongoing)
    check = check_watchdog(s)
    assert check.ok and check.detail.startswith("ok now; 2 event(s) in 7 days, last: answers undelivered")
    store.forget(["live-1"])
    events.begin("sandbox service unreachable", "live-2", now - timedelta(minutes=1), "refused")
    check = check_watchdog(s)  # its process is not alive: not ongoing
    assert check.ok and "until its process stopped" in check.detail


async def test_a_sandbox_service_that_stops_answering_two_pings_in_a_row_is_unreachable() -> None:
    async def hello(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readline()
        writer.write(b'{"kind": "hello", "isolation": "bwrap"}\n')
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(hello, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    assert await asyncio.to_thread(ping, address, "tok") is None
    clock = Clock()
    vigil = Vigil(tick_s=60, process="p", clock=clock)
    vigil.add(sandbox_condition([address], "tok", every_s=60))
    assert (await vigil.tick())[SANDBOX] is Change.NONE
    server.close()
    await server.wait_closed()
    clock.now += 60
    assert (await vigil.tick())[SANDBOX] is Change.NONE  # one failed ping: not yet
    clock.now += 30
    assert (await vigil.tick())[SANDBOX] is Change.NONE  # between pings: the last reading stands
    clock.now += 30
    assert (await vigil.tick())[SANDBOX] is Change.BEGAN
    tracker = vigil.tracker(SANDBOX)
    assert tracker.cause == f"unreachable: {address}: ConnectionRefusedError"
    assert "tok" not in tracker.cause
    server = await asyncio.start_server(hello, "127.0.0.1", port)
    clock.now += 60
    assert (await vigil.tick())[SANDBOX] is Change.ENDED
    server.close()
    await server.wait_closed()


def test_only_a_sandbox_service_is_pinged(tmp_path: Path) -> None:
    local = settings_for(tmp_path, "sqlite://")
    assert sandbox_addresses(local) == []
    pooled = settings_for(
        tmp_path, "sqlite://", code_sandbox_urls="tcp://a:7000,tcp://b:7000", code_sandbox_token="t0ken-xyz"
    )
    assert sandbox_addresses(pooled) == ["tcp://a:7000", "tcp://b:7000"]


async def test_the_lease_condition_reads_the_heartbeats_last_success() -> None:
    # The replica's own fields, as its heartbeat thread leaves them (bot/runtime/replica.py).
    replica = SimpleNamespace(joined=True, lease_s=15.0, renewed_at=time.monotonic(), beat_error="")
    vigil = Vigil(tick_s=5, process="p")
    vigil.add(lease_condition(replica))  # type: ignore[arg-type]
    assert (await vigil.tick())[LEASE] is Change.NONE
    replica.renewed_at = time.monotonic() - 20  # the database did not answer for 20 s
    replica.beat_error = "OperationalError"
    assert (await vigil.tick())[LEASE] is Change.BEGAN
    assert "OperationalError" in vigil.tracker(LEASE).cause
    assert vigil.status().startswith("unhealthy: job lease not renewed since ")
    replica.renewed_at, replica.beat_error = time.monotonic(), ""
    assert (await vigil.tick())[LEASE] is Change.ENDED
