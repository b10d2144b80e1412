"""Helpers for the tests of reminders and scheduled tasks: a time to ask for, and waiting for firings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from tests.support.harness import Harness


def local_at(seconds: float, now: datetime | None = None) -> str:
    """An `at` this many seconds from now, as local wall time (the test users' zone is UTC)."""
    base = now or datetime.now(UTC)
    return (base + timedelta(seconds=seconds)).replace(tzinfo=None).isoformat(timespec="seconds")


async def wait_sent(h: Harness, schedule_id: int, n: int = 1, timeout: float = 10.0) -> list[Any]:
    """Wait until `n` firings of the schedule are recorded as sent or failed; return them."""

    store = h.services.schedules.service.store

    def done() -> list[Any] | None:
        finished = [f for f in store.firings_of(schedule_id) if f.status in ("sent", "failed")]
        return finished if len(finished) >= n else None

    result: list[Any] = await h.tg.wait_for(done, timeout=timeout, what=f"{n} firing(s) of {schedule_id}")
    return result
