"""The nightly memory self-check (core_tools/memory/selfcheck.py) in the bot: one process at a time (the
"memory-check" job lease, bot/runtime/jobs.py), each user once a night after CHECK_HOUR in the owner's time
zone (a night the bot was down is caught up at the next tick), asking recall for a fresh sample of
NIGHTLY_SAMPLE of each user's memories (every row is repaired); the owner is told once per fall of a user's
figure below the threshold (the fall found by `python -m bot memory-check` too)."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

from bot.runtime.outbox import DeliveryFailed, Outbox
from core_tools.memory.selfcheck import NIGHTLY_SAMPLE, THRESHOLD, MemorySelfCheck
from db.engine import make_sessionmaker
from db.memory_check import StoredCheck

if TYPE_CHECKING:
    from bot.runtime.services import Services

log = logging.getLogger(__name__)

CHECK_HOUR = 3  # the owner's local time the night's check starts from
TICK_S = 600.0  # how often the job looks whether a check is due


def self_check(services: Services) -> MemorySelfCheck:
    """The self-check over the services' memory store and database."""
    return MemorySelfCheck(services.memory, make_sessionmaker(services.engine))


def last_night(now: datetime, zone: tzinfo) -> datetime:
    """The latest CHECK_HOUR in `zone` at or before `now` (UTC)."""
    local = now.astimezone(zone)
    start = local.replace(hour=CHECK_HOUR, minute=0, second=0, microsecond=0)
    if start > local:
        start -= timedelta(days=1)
    return start.astimezone(UTC)


def due(check: StoredCheck | None, now: datetime, zone: tzinfo) -> bool:
    """Whether a user's check is due: never checked, or last checked before last night's CHECK_HOUR."""
    return check is None or check.checked_at < last_night(now, zone)


def fall_notice(check: StoredCheck) -> str:
    """What the owner is told when a user's memories fall below the threshold (no memory's words)."""
    return (
        f"Memory check: only {check.percent:.1f} % of user {check.user_id}'s memories are findable "
        f"({check.findable} of {check.memories} came back in recall's top 5 by their first words), below "
        f"{THRESHOLD:.0f} %. The log names the ones missed; `python -m bot memory-check {check.user_id}` "
        "checks again. (Told once until it is back above.)"
    )


class MemoryCheckJob:
    """The job: check the users whose check is due, then tell the owner of new falls (through `outbox`)."""

    def __init__(self, services: Services, outbox: Outbox) -> None:
        self.services = services
        self.outbox = outbox
        self.check = self_check(services)

    def _zone(self) -> tzinfo:
        settings = self.services.settings
        owner = settings.owner_id
        name = self.services.conversations.user_timezone(owner) if owner is not None else None
        try:
            return ZoneInfo(name or settings.default_timezone)
        except Exception:
            return UTC

    async def tick(self) -> None:
        """Check each user whose check is due (one after another), then tell the owner of new falls."""
        now = datetime.now(UTC)
        zone = self._zone()
        last = {c.user_id: c for c in await self.check.all_checks()}
        for user_id in await self.check.users():
            if not due(last.get(user_id), now, zone):
                continue
            try:
                result = await self.check.check_user(user_id, sample=NIGHTLY_SAMPLE)
            except Exception:  # one user's failure does not stop the others'; the next tick tries again
                log.exception("memory check of user %s failed", user_id)
                continue
            log.info("memory check: %s", result.line())
        await self.tell()

    async def tell(self) -> None:
        """Tell the owner of each fall below the threshold not told yet; a failed send is tried next tick."""
        owner = self.services.settings.owner_id
        falls = await self.check.falls_to_tell()
        if not falls:
            return
        if owner is None:
            for check in falls:
                log.warning("no owner to tell: %s", fall_notice(check))
                await self.check.set_told(check.user_id, True)
            return
        for check in falls:
            try:
                await self.outbox.send(owner, fall_notice(check))
            except DeliveryFailed as exc:
                log.warning("could not tell the owner of user %s's memory check: %s", check.user_id, exc)
                continue
            await self.check.set_told(check.user_id, True)
