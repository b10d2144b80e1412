"""Reminders and scheduled tasks: validation, limits, storage and views, for the `schedule` tool,
`/reminders` and the reminder buttons; the firing state machine is in core_tools/schedule/delivery.py.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from core_tools.schedule.costs import CostHooks, check_limit, forecast_view, runs_within
from core_tools.schedule.delivery import ScheduleDelivery
from core_tools.schedule.expand import ExpansionError
from core_tools.schedule.rules import (
    ScheduleInputError,
    Spec,
    describe,
    occurrences_after,
)
from core_tools.schedule.validate import Limits, build_spec
from db.schedules import ACTIVE, CHECKIN, LIVE, PAUSED, FiringRow, ScheduleRow, Schedules

log = logging.getLogger(__name__)


class ScheduleService(ScheduleDelivery):
    """What the `schedule` tool, `/reminders` and the bot's delivery job do with schedules."""

    def __init__(
        self,
        store: Schedules,
        user_timezone: Callable[[int], str | None],
        *,
        default_timezone: str = "UTC",
        limits: Limits | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        costs: CostHooks | None = None,
    ) -> None:
        self.store = store
        self.costs = costs  # what tasks cost (the usage service); None: no forecasts or spend shown
        self.user_timezone = user_timezone
        self.default_timezone = default_timezone
        self.limits = limits or Limits()
        self.clock = clock
        # The tool runs in worker threads, several calls of one turn at once: the check of the active limit
        # and the insert it allows are one step.
        self._adding = threading.Lock()

    def next_times(self, row: ScheduleRow, n: int = 3) -> list[datetime]:
        """The next `n` fire times of a schedule (UTC), pending snoozes not included."""
        if row.next_fire_at is None or row.status not in LIVE:
            return []
        zone = ZoneInfo(self.zone_of(row))
        try:
            rest = occurrences_after(self.spec_of(row), zone, row.next_fire_at, n - 1)
        except ExpansionError as exc:  # a rule stored before the bounds: show what is known
            log.warning("schedule %s: its later times are not worked out: %s", row.id, exc)
            rest = []
        if row.count is not None:
            rest = rest[: max(0, row.count - row.fired_count - 1)]
        return [row.next_fire_at, *rest][:n]

    def view(self, row: ScheduleRow, spent: float | None = None) -> dict[str, Any]:
        """A schedule as the model and /reminders see it: times in the zone it follows; a task with what it
        spent this month (`spent`, USD, when known) and its limit."""
        zone_name = self.zone_of(row)
        zone = ZoneInfo(zone_name)
        out: dict[str, Any] = {
            "id": row.id,
            "kind": row.kind,
            "text": row.text,
            "status": row.status,
            "description": describe(self.spec_of(row), zone_name),
            "next": [f"{t.astimezone(zone):%a %d %b %Y %H:%M}" for t in self.next_times(row)],
            "timezone": zone_name,
        }
        if row.repeat:
            out["repeat"] = row.repeat
        if row.status == PAUSED:
            out["paused"] = row.pause_reason
        snooze = self.store.pending_firing_times([row.id]).get(row.id)
        if snooze is not None:
            out["snoozed_until"] = f"{snooze.astimezone(zone):%a %d %b %Y %H:%M}"
        if row.kind == "task":
            if row.max_cost_per_month is not None:
                out["max_cost_per_month"] = row.max_cost_per_month
            if spent is None and self.costs is not None:
                spent = self.costs.spent_this_month(row.user_id, [row.id]).get(row.id)
            if spent is not None:
                out["spent_this_month_usd"] = round(spent, 6)
        return out

    def spend_this_month(self, user_id: int, schedule_ids: Sequence[int]) -> dict[int, float]:
        """Estimated USD each of the user's tasks spent this calendar month (the user's zone); {} when costs
        are not known. The Mini App's per-task spend; `list_for` puts the same in each task's view."""
        if self.costs is None or not schedule_ids:
            return {}
        return self.costs.spent_this_month(user_id, schedule_ids)

    def _forecast(self, row: ScheduleRow, schedule_id: int | None) -> dict[str, Any] | None:
        """A task's forecast cost per run and per month (None for a reminder or without costs)."""
        if row.kind != "task" or self.costs is None:
            return None
        estimate = self.costs.forecast(row.user_id, schedule_id)
        runs = runs_within(self.spec_of(row), ZoneInfo(self.zone_of(row)), self.clock(), row.fired_count)
        return forecast_view(estimate, runs, row.repeat is not None, row.max_cost_per_month)

    # ------------------------------------------------------------------ the tool's actions

    def create(
        self,
        *,
        user_id: int,
        chat_id: int,
        chat_type: str,
        text: str,
        at: str | None,
        repeat: str | None = None,
        kind: str = "message",
        until: str | None = None,
        count: int | None = None,
        max_cost_per_month: float | None = None,
    ) -> dict[str, Any]:
        """Validate and store a schedule; returns its view (id, next times, description; a task's forecast
        cost per run and per month)."""
        now = self.clock()
        zone_name = self.zone_of_user(user_id)
        limit = check_limit(max_cost_per_month, updating=False)
        if limit is not None and kind != "task":
            raise ScheduleInputError("max_cost_per_month is for tasks: a message reminder costs nothing")
        self._check_room(user_id)
        spec, explicit, first = build_spec(
            limits=self.limits,
            zone_name=zone_name,
            kind=kind,
            text=text,
            at=at,
            repeat=repeat,
            until=until,
            count=count,
            now=now,
        )
        with self._adding:
            self._check_room(user_id)
            row = self.store.add(
                user_id=user_id,
                chat_id=chat_id,
                chat_type=chat_type,
                kind=kind,
                text=text.strip(),
                start_local=spec.start_local.isoformat(),
                # An explicit offset pins the schedule to the zone it was made in; a local time follows the
                # user's zone, so a later /timezone moves its future firings.
                timezone=zone_name if explicit else None,
                zone_used=zone_name,
                repeat=spec.repeat.text if spec.repeat else None,
                repeat_kind=spec.repeat.kind if spec.repeat else None,
                until_at=spec.until,
                count=spec.count,
                fired_count=0,
                status=ACTIVE,
                failures=0,
                next_fire_at=first,
                max_cost_per_month=limit,
            )
        log.info("schedule %s created by user %s (%s, next %s)", row.id, user_id, kind, first.isoformat())
        return self._with_forecast(row, None)

    def _with_forecast(self, row: ScheduleRow, schedule_id: int | None) -> dict[str, Any]:
        out = self.view(row)
        try:
            forecast = self._forecast(row, schedule_id)
        except Exception:  # the schedule is stored: a failing forecast must not read as a failed create
            log.exception("schedule %s: could not work out its forecast cost", row.id)
            forecast = None
        if forecast is not None:
            out["forecast"] = forecast
        return out

    def _check_room(self, user_id: int) -> None:
        if self.store.count_active(user_id) >= self.limits.max_active:
            raise ScheduleInputError(
                f"the user already has {self.limits.max_active} active schedules (the limit); "
                "cancel one first (action list shows them)"
            )

    def _owned(self, user_id: int, schedule_id: int, chat_scope: int | None) -> ScheduleRow:
        row = self.store.get(schedule_id)
        # Another user's schedule, or one of another chat seen from a group, is "unknown": no hint it exists.
        if (
            row is None
            or row.user_id != user_id
            or row.kind == CHECKIN  # a check-in is changed with /checkin only
            or (chat_scope is not None and row.chat_id != chat_scope)
        ):
            raise ScheduleInputError(f"there is no schedule with id {schedule_id} (action list shows them)")
        return row

    def list_for(self, user_id: int, chat_scope: int | None = None) -> list[dict[str, Any]]:
        """The user's schedules (in one chat when `chat_scope` is set: a group sees only its own); a task's
        view has what it spent this month (`spent_this_month_usd`) when costs are known."""
        rows = self.store.of_user(user_id, chat_scope)
        spent = self.spend_this_month(user_id, [r.id for r in rows if r.kind == "task"])
        return [self.view(r, spent.get(r.id, 0.0) if self.costs is not None else None) for r in rows]

    def cancel(self, user_id: int, schedule_id: int, chat_scope: int | None = None) -> dict[str, Any]:
        """Cancel a schedule of the user, and any snooze of it still waiting."""
        row = self._owned(user_id, schedule_id, chat_scope)
        pending = self.store.pending_firing_times([row.id])
        if row.status not in LIVE and not pending:
            raise ScheduleInputError(f"schedule {schedule_id} has already ended ({row.status})")
        self.store.cancel_pending([row.id])
        changed = self.store.change(row.id, status="cancelled", next_fire_at=None)
        assert changed is not None
        log.info("schedule %s cancelled by user %s", row.id, user_id)
        return {"id": row.id, "cancelled": True, "text": row.text}

    def update(
        self,
        user_id: int,
        schedule_id: int,
        *,
        chat_scope: int | None = None,
        text: str | None = None,
        at: str | None = None,
        repeat: str | None = None,
        until: str | None = None,
        count: int | None = None,
        max_cost_per_month: float | None = None,
    ) -> dict[str, Any]:
        """Change a schedule's text, time, repeat (`repeat` "none" removes it) or a task's monthly limit (0
        removes it); a paused one resumes. A task's view has its forecast cost."""
        row = self._owned(user_id, schedule_id, chat_scope)
        if row.status not in LIVE:
            raise ScheduleInputError(f"schedule {schedule_id} has ended ({row.status}); create a new one")
        limit = check_limit(max_cost_per_month, updating=True)
        if limit is not None and row.kind != "task":
            raise ScheduleInputError("max_cost_per_month is for tasks: a message reminder costs nothing")
        new_limit = row.max_cost_per_month if limit is None else (limit or None)
        now = self.clock()
        zone_name = self.zone_of(row)
        old = self.spec_of(row)
        new_repeat: str | None
        if repeat is None:
            new_repeat = row.repeat
        elif repeat.strip().lower() in ("", "none", "no", "once"):
            new_repeat = None
        else:
            new_repeat = repeat
        if at is None and row.repeat is None and new_repeat is None:
            # Changing only the text of a one-shot keeps its time, which is in the future by construction.
            at_text: str | None = old.start_local.isoformat()
        else:
            at_text = at if at is not None else old.start_local.isoformat()
        keep_until = until is None and repeat is None
        spec, explicit, first = build_spec(
            limits=self.limits,
            zone_name=zone_name,
            kind=row.kind,
            text=text if text is not None else row.text,
            at=at_text,
            repeat=new_repeat,
            until=until,
            count=count if count is not None else (row.count if repeat is None else None),
            now=now,
        )
        if keep_until and row.until_at is not None and spec.repeat is not None:
            spec = Spec(spec.start_local, spec.repeat, row.until_at, spec.count)
        changed = self.store.change(
            row.id,
            text=(text if text is not None else row.text).strip(),
            start_local=spec.start_local.isoformat(),
            timezone=zone_name if explicit else row.timezone,
            zone_used=zone_name,
            repeat=spec.repeat.text if spec.repeat else None,
            repeat_kind=spec.repeat.kind if spec.repeat else None,
            until_at=spec.until,
            count=spec.count,
            fired_count=0,
            status=ACTIVE,
            pause_reason=None,
            failures=0,
            next_fire_at=first,
            max_cost_per_month=new_limit,
        )
        assert changed is not None
        return self._with_forecast(changed, changed.id)

    def resume(self, user_id: int, schedule_id: int) -> dict[str, Any]:
        """Resume a paused schedule from its next occurrence after now."""
        row = self._owned(user_id, schedule_id, None)
        if row.status != PAUSED:
            raise ScheduleInputError(f"schedule {schedule_id} is not paused")
        nxt = self._next_from_now(row, self.clock())
        changed = self.store.change(
            row.id,
            status=ACTIVE if nxt is not None else "done",
            pause_reason=None,
            failures=0,
            next_fire_at=nxt,
        )
        assert changed is not None
        return self.view(changed)

    def pause(self, user_id: int, schedule_id: int) -> dict[str, Any]:
        """Pause an active schedule of the user (a snooze of it still waiting is dropped); resume continues
        from its next occurrence after then."""
        row = self._owned(user_id, schedule_id, None)
        if row.status != ACTIVE:
            raise ScheduleInputError(f"schedule {schedule_id} is not active ({row.status})")
        self.store.cancel_pending([row.id])
        changed = self.store.change(row.id, status=PAUSED, pause_reason="user")
        assert changed is not None
        log.info("schedule %s paused by user %s", row.id, user_id)
        return self.view(changed)

    def get_for(self, user_id: int, schedule_id: int) -> dict[str, Any] | None:
        """One schedule of the user as `view` shows it; None for an unknown id or another user's."""
        row = self.store.get(schedule_id)
        return self.view(row) if row is not None and row.user_id == user_id else None

    # ------------------------------------------------------------------ buttons

    def _owned_firing(self, user_id: int, firing_id: int) -> FiringRow:
        f = self.store.firing(firing_id)
        if f is None or f.user_id != user_id:
            raise ScheduleInputError("this reminder is not yours")
        return f

    def snooze(self, user_id: int, firing_id: int, minutes: int) -> datetime:
        """Deliver a fired reminder again in `minutes`; returns when (UTC)."""
        f = self._owned_firing(user_id, firing_id)
        if f.ack is not None:
            raise ScheduleInputError(f"this reminder is already {f.ack}")
        row = self.store.get(f.schedule_id)
        assert row is not None
        when = self.clock() + timedelta(minutes=minutes)
        self.store.add_firing(row, when, snoozed=True, now=self.clock())
        self.store.set_firings([f.id], ack="snoozed")
        return when

    def snooze_next(self, user_id: int, schedule_id: int, minutes: int) -> datetime:
        """Make the next occurrence of an active reminder come `minutes` later (a check-in's Snooze, before
        it fired): a one-time reminder moves; a repeating one gets a snoozed firing then, and goes on from
        the occurrence after. Returns when it comes (UTC)."""
        row = self._owned(user_id, schedule_id, None)
        if row.kind != "message" or row.status != ACTIVE or row.next_fire_at is None:
            raise ScheduleInputError("that reminder is not waiting any more")
        later = row.next_fire_at + timedelta(minutes=minutes)
        zone = ZoneInfo(self.zone_of(row))
        if row.repeat is None:
            start = later.astimezone(zone).replace(tzinfo=None).isoformat(timespec="seconds")
            self.store.change(row.id, next_fire_at=later, start_local=start)
            return later
        following = occurrences_after(self.spec_of(row), zone, row.next_fire_at, 1)
        if row.count is not None and row.fired_count + 1 >= row.count:
            following = []
        self.store.add_firing(row, later, snoozed=True, now=self.clock())
        self.store.change(
            row.id,
            next_fire_at=following[0] if following else None,
            fired_count=row.fired_count + 1,
            status=ACTIVE if following else "done",
        )
        return later

    def done(self, user_id: int, firing_id: int) -> FiringRow:
        """Mark a fired reminder as done (a repeating one keeps its future occurrences)."""
        f = self._owned_firing(user_id, firing_id)
        if f.ack == "done":
            raise ScheduleInputError("this reminder is already done")
        self.store.set_firings([f.id], ack="done")
        return f

    def schedule_for_firing(self, firing: FiringRow) -> ScheduleRow | None:
        """The schedule a firing belongs to."""
        return self.store.get(firing.schedule_id)

    def local(self, user_id: int, instant: datetime) -> str:
        """An instant as the user's local 'HH:MM' (with the date when it is not today)."""
        zone = ZoneInfo(self.zone_of_user(user_id))
        local, today = instant.astimezone(zone), self.clock().astimezone(zone).date()
        return f"{local:%H:%M}" if local.date() == today else f"{local:%a %d %b %H:%M}"
