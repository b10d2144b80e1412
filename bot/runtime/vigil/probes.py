"""The conditions every front end's process watches, read from its live parts: answers it cannot send, firings
left in `sending`, its heartbeat (which keeps its job leases), the sandbox service. Each probe is cheap: the
process's own state, one small query, or a ping at its own interval."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from bot.runtime.vigil.conditions import PingWatch, Reading, SendingWatch, lease_lapsed, undelivered
from bot.runtime.vigil.deliveries import Deliveries
from bot.runtime.vigil.monitor import Condition, Episode, hhmm

if TYPE_CHECKING:
    from bot.config.settings import Settings
    from bot.runtime.replica import Replica
    from bot.runtime.schedule_jobs import ScheduleRunner

log = logging.getLogger(__name__)

UNDELIVERED = "answers undelivered"
SENDING = "firings stuck in sending"
LEASE = "job lease not renewed"
SANDBOX = "sandbox service unreachable"
POLLING = "polling stalled"
WEBHOOK = "webhook not delivering"

PING_TIMEOUT_S = 5.0


def undelivered_condition(deliveries: Deliveries, threshold_s: float) -> Condition:
    """Answers stored whose sends keep failing for `threshold_s`; the owner is told once they went."""

    async def probe(now: float) -> Reading | None:
        reading = undelivered(deliveries.clock(), deliveries.pending(), threshold_s)
        if reading is not None:
            return Reading(now - (deliveries.clock() - reading.since), reading.cause)
        return None

    async def began() -> None:
        deliveries.take_late()  # answers delivered late before the onset are not this episode's

    def notice(e: Episode) -> str:
        count = deliveries.take_late()
        return (
            f"I could not send answers from {hhmm(e.started)} to {hhmm(e.ended)} ({e.cause}); "
            f"{count} answer(s) that waited meanwhile are delivered now."
        )

    return Condition(UNDELIVERED, probe, notice=notice, on_begin=began)


def sending_condition(runner: ScheduleRunner, threshold_s: float) -> Condition:
    """Firings left in `sending` for `threshold_s` (not being sent here, and this process fires the
    schedules): recovered as a start recovers them, and the owner told."""
    watch = SendingWatch(threshold_s)
    stuck: list[int] = []

    async def probe(now: float) -> Reading | None:
        nonlocal stuck
        ids = await asyncio.to_thread(runner.left_sending)
        reading, stuck = watch.observe(now, ids or ())
        return reading

    healing: set[asyncio.Task[None]] = set()

    async def resend(ids: list[int]) -> None:
        try:
            await runner.recover_left(ids)
        except Exception:  # the next look finds them still there
            log.exception("watchdog: could not recover the firings left in sending")

    async def heal() -> None:
        # In a task of its own: sending them again must not hold up the watchdog's other looks.
        task = asyncio.get_running_loop().create_task(resend(list(stuck)), name="resend-stuck")
        healing.add(task)
        task.add_done_callback(healing.discard)

    def notice(e: Episode) -> str:
        return (
            f"Reminders were stuck in sending from {hhmm(e.started)} to {hhmm(e.ended)} ({e.cause}, left by "
            "a process that stopped while sending them); they are sent again now, marked as a possible copy."
        )

    return Condition(SENDING, probe, notice=notice, on_begin=heal)


def lease_condition(replica: Replica) -> Condition:
    """The heartbeat that keeps this process's job leases not renewed for a whole lease (REPLICA_LEASE_S)."""

    async def probe(now: float) -> Reading | None:
        if not replica.joined:
            return None
        mono = time.monotonic()
        reading = lease_lapsed(mono, replica.renewed_at, replica.lease_s, replica.beat_error)
        return None if reading is None else Reading(now - (mono - reading.since), reading.cause)

    return Condition(LEASE, probe)


def sandbox_addresses(settings: Settings) -> list[str]:
    """The sandbox services this process runs code in (none: the local bwrap sandbox, which needs no ping)."""
    if settings.sandbox_urls:
        return settings.sandbox_urls
    return [settings.code_sandbox_socket] if settings.code_sandbox_socket else []


def ping(address: str, token: str | None, timeout_s: float = PING_TIMEOUT_S) -> str | None:
    """Say hello to a sandbox service (blocking: run it in a thread); None when it answered, else why not."""
    from core_tools.sandbox.client import blocking_exchange
    from core_tools.sandbox.protocol import encode, parse_address

    hello: dict[str, str] = {"op": "hello"} if token is None else {"op": "hello", "token": token}
    try:
        blocking_exchange(parse_address(address), encode(hello), timeout_s)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{address}: {type(exc).__name__}"
    return None


def sandbox_condition(addresses: Sequence[str], token: str | None, every_s: float) -> Condition:
    """A sandbox service that does not answer two pings in a row (`every_s` apart)."""
    watch = PingWatch()

    async def probe(now: float) -> Reading | None:
        answers = await asyncio.gather(*(asyncio.to_thread(ping, a, token) for a in addresses))
        return watch.observe(now, [a for a in answers if a is not None])

    return Condition(SANDBOX, probe, after_s=every_s, every_s=every_s)


__all__ = [
    "LEASE",
    "POLLING",
    "SANDBOX",
    "SENDING",
    "UNDELIVERED",
    "WEBHOOK",
    "lease_condition",
    "sandbox_addresses",
    "sandbox_condition",
    "sending_condition",
    "undelivered_condition",
]
