"""Helpers for the tests of reminders and scheduled tasks: a time to ask for, and waiting for firings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.harness import Harness


def local_at(seconds: float, now: datetime | None = None) -> str:
    """An `at` this many seconds after `now` (cut to the second), as local wall time (the test users' zone
    is UTC). Without `now`: at least this many seconds from now, rounded up, since cut down `local_at(1)`
    could be a few milliseconds ahead and in the past ("at ... is in the past") by the time a loaded
    machine creates the schedule."""
    at = (now or datetime.now(UTC)) + timedelta(seconds=seconds)
    if now is None and at.microsecond:
        at = at.replace(microsecond=0) + timedelta(seconds=1)
    return at.replace(tzinfo=None).isoformat(timespec="seconds")


async def wait_sent(h: Harness, schedule_id: int, n: int = 1, timeout: float = 60.0) -> list[Any]:
    """Wait until `n` firings of the schedule are recorded as sent or failed; return them."""

    store = h.services.schedules.service.store

    def done() -> list[Any] | None:
        finished = [f for f in store.firings_of(schedule_id) if f.status in ("sent", "failed")]
        return finished if len(finished) >= n else None

    result: list[Any] = await h.tg.wait_for(done, timeout=timeout, what=f"{n} firing(s) of {schedule_id}")
    return result
