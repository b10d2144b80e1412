"""Scheduled firings: the state machine the bot's delivery job drives, and the zones and recurrences it
works from (the base of core_tools/schedule/service.py's ScheduleService).

The database is the source of truth: a schedule row carries its next fire time (UTC); firing it inserts a
firing row and advances the schedule in one transaction. A firing goes due -> sending -> sent | failed.
The clock is injected, so tests drive time without sleeping; the bot's job queue decides when to look.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from core_tools.schedule.rules import (
    Repeat,
    Spec,
    advance,
    localize,
    occurrences_after,
    rebased_start,
    wall,
)
from db.schedules import ACTIVE, PAUSED, FiringRow, ScheduleRow, Schedules

log = logging.getLogger(__name__)

FAILURES_BEFORE_PAUSE = 3
# Sending a firing is retried this many times, waiting BACKOFF_S[attempt] seconds (the last value repeats).
MAX_SEND_ATTEMPTS = 6
BACKOFF_S = (2.0, 5.0, 15.0, 60.0, 300.0)


def backoff(attempt: int) -> float:
    """Seconds to wait before retry number `attempt` (1-based) of a transient send failure."""
    return BACKOFF_S[min(max(attempt, 1), len(BACKOFF_S)) - 1]


class ScheduleDelivery:
    """What the bot's delivery job does with schedules and their firings."""

    store: Schedules
    user_timezone: Callable[[int], str | None]
    default_timezone: str
    clock: Callable[[], datetime]

    # ------------------------------------------------------------------ zones and specs

    def zone_of_user(self, user_id: int) -> str:
        """The user's zone name (else the default, else UTC)."""
        name = self.user_timezone(user_id) or self.default_timezone
        try:
            ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            return "UTC"
        return name

    def zone_of(self, row: ScheduleRow) -> str:
        """The zone a schedule's wall-clock times are in: its own, or its user's current one."""
        return row.timezone or self.zone_of_user(row.user_id)

    @staticmethod
    def spec_of(row: ScheduleRow) -> Spec:
        """The recurrence of a stored schedule."""
        repeat = Repeat(row.repeat_kind or "rrule", row.repeat) if row.repeat else None
        return Spec(datetime.fromisoformat(row.start_local), repeat, row.until_at, row.count)

    def _next_from_now(self, row: ScheduleRow, now: datetime) -> datetime | None:
        if row.next_fire_at is not None and row.next_fire_at > now:
            return row.next_fire_at
        if row.repeat is None:
            return now  # a paused one-shot that missed its time: deliver it now
        zone = ZoneInfo(self.zone_of(row))
        found = occurrences_after(self.spec_of(row), zone, now, 1)
        return found[0] if found else None

    # ------------------------------------------------------------------ the delivery job's side

    def fire_due(self, limit: int = 500, chat_id: int | None = None) -> list[int]:
        """Turn every schedule whose time has come into a firing and advance it; returns firing ids.

        A repeating schedule missed for several occurrences (the bot was down) fires once, with `missed`
        saying how many more it stood for; its next time is the first occurrence after now. With `chat_id`
        only that chat's schedules fire (the terminal chat, which cannot deliver to any other).
        """
        now = self.clock()
        fired: list[int] = []
        zones: dict[int, str] = {}  # one look-up per user, not per schedule: 500 may fall due at 09:00
        while True:
            rows = self.store.due_schedules(now, limit, chat_id)
            if not rows:
                return fired
            changes: list[tuple[ScheduleRow, int, datetime | None, str | None]] = []
            for row in rows:
                assert row.next_fire_at is not None
                start: datetime | None = None
                try:
                    if row.timezone is None and row.user_id not in zones:
                        zones[row.user_id] = self.zone_of_user(row.user_id)
                    zone = ZoneInfo(row.timezone or zones[row.user_id])
                    spec = self.spec_of(row)
                    consumed, nxt = advance(spec, zone, row.next_fire_at, now, row.fired_count)
                    start = rebased_start(spec, zone, nxt) if nxt is not None else None
                except Exception:  # one broken row must not stop every other reminder
                    log.exception("schedule %s: could not compute its next time; it fires once more", row.id)
                    consumed, nxt = 1, None
                changes.append((row, consumed, nxt, start.isoformat() if start else None))
            fired.extend(self.store.fire(changes, now))
            if len(rows) < limit:
                return fired

    def due_firings(
        self, limit: int, exclude: Sequence[int] = (), chat_id: int | None = None
    ) -> list[FiringRow]:
        """Firings to send now (excluding the ones already being sent by this process; of one chat)."""
        return self.store.due_firings(self.clock(), limit, exclude, chat_id)

    def next_wake(self, chat_id: int | None = None) -> datetime | None:
        """When something next needs doing: a schedule falls due or a firing may be (re)tried (in one
        chat, given `chat_id`)."""
        times = [
            t for t in (self.store.next_schedule_time(chat_id), self.store.next_firing_time(chat_id)) if t
        ]
        return min(times) if times else None

    def mark_sending(self, ids: Sequence[int]) -> None:
        """Record that these firings are about to be sent (before the request leaves)."""
        self.store.set_firings(ids, status="sending")

    def outcome_sent(self, message_id: int | None) -> dict[str, Any]:
        """The row values of a delivered firing."""
        return {"status": "sent", "message_id": message_id, "sent_at": self.clock(), "error": None}

    def outcome_retry(self, attempts: int, error: str, wait_s: float | None = None) -> dict[str, Any]:
        """The row values of a transient failure: due again after a backoff, or failed after the last try."""
        if attempts >= MAX_SEND_ATTEMPTS:
            return {
                "status": "failed",
                "attempts": attempts,
                "error": f"gave up after {attempts} tries: {error}",
            }
        wait = wait_s if wait_s is not None else backoff(attempts)
        return {
            "status": "due",
            "attempts": attempts,
            "error": error,
            "not_before": self.clock() + timedelta(seconds=wait),
        }

    @staticmethod
    def outcome_failed(attempts: int, error: str) -> dict[str, Any]:
        """The row values of a firing that cannot be delivered."""
        return {"status": "failed", "attempts": attempts, "error": error}

    def record(self, results: Sequence[tuple[int, dict[str, Any]]]) -> None:
        """Store the outcomes of several firings at once."""
        self.store.mark_many(results)

    def pause_chat(self, chat_id: int, reason: str) -> int:
        """Pause every active schedule delivered to a chat (the user blocked the bot: 403)."""
        self.store.cancel_pending(chat_id=chat_id)
        count = self.store.set_status_for_chat(chat_id, PAUSED, reason)
        log.warning("paused %d schedules of chat %s (%s)", count, chat_id, reason)
        return count

    def task_succeeded(self, schedule_id: int) -> None:
        """A task ran: its count of consecutive failures starts again."""
        row = self.store.get(schedule_id)
        if row is not None and row.failures:
            self.store.change(schedule_id, failures=0)

    def pause_for_cost(self, schedule_id: int) -> bool:
        """Pause an active task whose run cost far more than usual (reason "cost"); False if not active."""
        row = self.store.get(schedule_id)
        if row is None or row.status != ACTIVE:
            return False
        self.store.change(schedule_id, status=PAUSED, pause_reason="cost")
        log.warning("schedule %s paused: a run cost far more than its usual runs", schedule_id)
        return True

    def task_failed(self, schedule_id: int) -> bool:
        """Count a failed task run; after FAILURES_BEFORE_PAUSE in a row it is paused (returns True)."""
        row = self.store.get(schedule_id)
        if row is None:
            return False
        failures = row.failures + 1
        if failures >= FAILURES_BEFORE_PAUSE and row.status == ACTIVE:
            self.store.change(schedule_id, failures=failures, status=PAUSED, pause_reason="failures")
            return True
        self.store.change(schedule_id, failures=failures)
        return False

    def recover(self, only: Collection[int] | None = None) -> tuple[list[FiringRow], list[FiringRow]]:
        """At start: firings cut by a restart while being sent. Messages (and task answers already
        produced) are sent again marked as a possible repeat; a task whose turn was cut is not re-run
        (that would cost money again): it is failed, and the bot's restart notice tells the user.
        `only`: just these firings (the watchdog found them left in `sending` by a killed process).
        Returns (to resend, failed)."""
        resend, failed = [], []
        for f in self.store.firings_in("sending"):
            if only is not None and f.id not in only:
                continue
            # A check-in costs nothing to plan again (a digest already written is kept as its result).
            if f.kind in ("message", "checkin") or f.result_text is not None:
                resend.append(f)
            else:
                failed.append(f)
        self.store.set_firings([f.id for f in resend], status="due", resend=True, not_before=self.clock())
        self.store.set_firings([f.id for f in failed], status="failed", error="interrupted by a restart")
        for f in failed:
            self.task_failed(f.schedule_id)
        return resend, failed

    def reconcile_zones(self) -> int:
        """Recompute the next time of schedules that follow a user whose zone changed (/timezone)."""
        now = self.clock()
        moved = 0
        for row, zone_name in self.store.floating_with_stale_zone(self.default_timezone):
            try:
                zone = ZoneInfo(zone_name)
            except (ZoneInfoNotFoundError, ValueError):
                continue
            nxt = row.next_fire_at
            if row.status == ACTIVE and row.next_fire_at is not None:
                # The occurrence that was next keeps its wall-clock time in the new zone; if that is now
                # past, the following occurrence is next (nothing fires for the zone change itself).
                old_wall = wall(row.next_fire_at, ZoneInfo(row.zone_used))
                moved_time = localize(old_wall, zone)
                if moved_time > now:
                    nxt = moved_time
                else:
                    found = occurrences_after(self.spec_of(row), zone, now, 1)
                    nxt = found[0] if found else None
            self.store.change(
                row.id,
                zone_used=zone_name,
                next_fire_at=nxt,
                status=row.status if nxt is not None or row.status != ACTIVE else "done",
            )
            moved += 1
        return moved

    def repair(self) -> int:
        """At start: give an active schedule without a next time one (or end it)."""
        now = self.clock()
        fixed = 0
        for row in self.store.active_without_time():
            nxt = self._next_from_now(row, now)
            self.store.change(row.id, next_fire_at=nxt, status=ACTIVE if nxt else "done")
            fixed += 1
        return fixed
