"""Schedules and their firings: the source of truth of every reminder and scheduled task."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Table, and_, bindparam, func, insert, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from db.models import Schedule, ScheduleFiring, User, utcnow

ACTIVE = "active"
PAUSED = "paused"
LIVE = (ACTIVE, PAUSED)
# A check-in's schedule (core_tools/checkin/): fired by the same machinery, but not a reminder the user
# lists, counts against the limit or changes with the `schedule` tool.
CHECKIN = "checkin"


@dataclass(frozen=True)
class ScheduleRow:
    """A schedule as plain data."""

    id: int
    user_id: int
    chat_id: int
    chat_type: str
    kind: str
    text: str
    start_local: str
    timezone: str | None
    zone_used: str
    repeat: str | None
    repeat_kind: str | None
    until_at: datetime | None
    count: int | None
    fired_count: int
    status: str
    pause_reason: str | None
    failures: int
    next_fire_at: datetime | None
    max_cost_per_month: float | None = None  # USD a task may spend a calendar month; None: no limit


@dataclass(frozen=True)
class FiringRow:
    """A firing as plain data, with what delivering it needs from its schedule."""

    id: int
    schedule_id: int
    user_id: int
    chat_id: int
    chat_type: str
    kind: str
    text: str
    due_at: datetime
    status: str
    attempts: int
    missed: int
    snoozed: bool
    resend: bool
    result_text: str | None
    message_id: int | None
    ack: str | None
    repeating: bool


_SCHEDULE_FIELDS = tuple(ScheduleRow.__dataclass_fields__)
_SCHEDULES: Table = Schedule.__table__  # type: ignore[assignment]
_FIRINGS: Table = ScheduleFiring.__table__  # type: ignore[assignment]
_ADVANCE = (
    update(_SCHEDULES)
    .where(_SCHEDULES.c.id == bindparam("b_id"))
    .values(
        next_fire_at=bindparam("b_next"),
        fired_count=_SCHEDULES.c.fired_count + bindparam("b_consumed"),
        status=bindparam("b_status"),
        start_local=bindparam("b_start"),
        updated_at=bindparam("b_now"),
    )
)

# Firings with their schedule, filtered by the caller.
_WITH_SCHEDULE = select(ScheduleFiring, Schedule).join(Schedule, Schedule.id == ScheduleFiring.schedule_id)


def _row(s: Schedule) -> ScheduleRow:
    return ScheduleRow(**{f: getattr(s, f) for f in _SCHEDULE_FIELDS})


def _firing(f: ScheduleFiring, s: Schedule) -> FiringRow:
    return FiringRow(
        id=f.id,
        schedule_id=f.schedule_id,
        user_id=f.user_id,
        chat_id=f.chat_id,
        chat_type=s.chat_type,
        kind=s.kind,
        text=s.text,
        due_at=f.due_at,
        status=f.status,
        attempts=f.attempts,
        missed=f.missed,
        snoozed=f.snoozed,
        resend=f.resend,
        result_text=f.result_text,
        message_id=f.message_id,
        ack=f.ack,
        repeating=s.repeat is not None,
    )


class Schedules:
    """Queries over `schedules` and `schedule_firings`; every method is one short transaction."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    # ------------------------------------------------------------------ schedules

    def add(self, **values: Any) -> ScheduleRow:
        """Insert a schedule."""
        with self._sessions.begin() as s:
            row = Schedule(**values, created_at=utcnow(), updated_at=utcnow())
            s.add(row)
            s.flush()
            return _row(row)

    def get(self, schedule_id: int) -> ScheduleRow | None:
        """One schedule by id."""
        with self._sessions() as s:
            row = s.get(Schedule, schedule_id)
            return _row(row) if row is not None else None

    def change(self, schedule_id: int, **values: Any) -> ScheduleRow | None:
        """Update columns of one schedule."""
        with self._sessions.begin() as s:
            row = s.get(Schedule, schedule_id)
            if row is None:
                return None
            for key, value in values.items():
                setattr(row, key, value)
            row.updated_at = utcnow()
            s.flush()
            return _row(row)

    def count_active(self, user_id: int) -> int:
        """Active and paused schedules of a user (what the per-user limit counts)."""
        with self._sessions() as s:
            q = select(func.count()).where(
                Schedule.user_id == user_id, Schedule.status.in_(LIVE), Schedule.kind != CHECKIN
            )
            return int(s.scalar(q) or 0)

    def of_user(self, user_id: int, chat_id: int | None = None) -> list[ScheduleRow]:
        """A user's live schedules and ended ones with a snoozed firing pending (in one chat, if given)."""
        pending = select(ScheduleFiring.schedule_id).where(ScheduleFiring.status == "due")
        with self._sessions() as s:
            q = select(Schedule).where(
                Schedule.user_id == user_id,
                Schedule.kind != CHECKIN,
                or_(Schedule.status.in_(LIVE), Schedule.id.in_(pending)),
            )
            if chat_id is not None:
                q = q.where(Schedule.chat_id == chat_id)
            return [_row(r) for r in s.scalars(q.order_by(Schedule.next_fire_at, Schedule.id))]

    def pending_firing_times(self, schedule_ids: Sequence[int]) -> dict[int, datetime]:
        """The earliest pending (due) firing of each schedule, e.g. a snooze."""
        if not schedule_ids:
            return {}
        with self._sessions() as s:
            q = (
                select(ScheduleFiring.schedule_id, func.min(ScheduleFiring.not_before))
                .where(ScheduleFiring.status == "due", ScheduleFiring.schedule_id.in_(schedule_ids))
                .group_by(ScheduleFiring.schedule_id)
            )
            return {sid: when for sid, when in s.execute(q)}

    def due_schedules(self, now: datetime, limit: int, chat_id: int | None = None) -> list[ScheduleRow]:
        """Active schedules whose next fire time has come (only those of one chat, given `chat_id`)."""
        with self._sessions() as s:
            q = (
                select(Schedule)
                .where(Schedule.status == ACTIVE, Schedule.next_fire_at <= now)
                .order_by(Schedule.next_fire_at)
                .limit(limit)
            )
            if chat_id is not None:
                q = q.where(Schedule.chat_id == chat_id)
            return [_row(r) for r in s.scalars(q)]

    def fire(
        self, changes: Iterable[tuple[ScheduleRow, int, datetime | None, str | None]], now: datetime
    ) -> list[int]:
        """For each (schedule, occurrences consumed, next fire time, new start or None): insert its firing
        and advance it, in one transaction, so an occurrence is never lost nor fired twice. Returns the new
        firing ids."""
        firings: list[dict[str, Any]] = []
        advances: list[dict[str, Any]] = []
        for row, consumed, nxt, start in changes:
            assert row.next_fire_at is not None
            firings.append(
                {
                    "schedule_id": row.id,
                    "user_id": row.user_id,
                    "chat_id": row.chat_id,
                    "due_at": row.next_fire_at,
                    "not_before": row.next_fire_at,
                    "status": "due",
                    "attempts": 0,
                    "missed": consumed - 1,
                    "snoozed": False,
                    "resend": False,
                    "created_at": now,
                }
            )
            advances.append(
                {
                    "b_id": row.id,
                    "b_next": nxt,
                    "b_consumed": consumed,
                    "b_status": ACTIVE if nxt is not None else "done",
                    "b_start": start if start is not None else row.start_local,
                    "b_now": now,
                }
            )
        if not firings:
            return []
        # Two executemany statements: 500 schedules falling due at 09:00 fire in one short transaction.
        with self._sessions.begin() as s:
            ids = list(s.scalars(insert(_FIRINGS).returning(_FIRINGS.c.id), firings))
            s.connection().execute(_ADVANCE, advances)
            return ids

    def set_status_for_chat(self, chat_id: int, status: str, reason: str | None) -> int:
        """Pause (or resume) every active schedule delivered to a chat."""
        with self._sessions.begin() as s:
            res = s.execute(
                update(Schedule)
                .where(Schedule.chat_id == chat_id, Schedule.status == ACTIVE)
                .values(status=status, pause_reason=reason, updated_at=utcnow())
            )
            return int(res.rowcount or 0)  # type: ignore[attr-defined]

    def floating_with_stale_zone(self, default_zone: str) -> list[tuple[ScheduleRow, str]]:
        """Active schedules that follow the user's zone but were computed in another one."""
        zone = func.coalesce(User.timezone, default_zone)
        with self._sessions() as s:
            q = (
                select(Schedule, zone)
                .outerjoin(User, User.id == Schedule.user_id)
                .where(Schedule.status.in_(LIVE), Schedule.timezone.is_(None), Schedule.zone_used != zone)
            )
            return [(_row(r), str(z)) for r, z in s.execute(q)]

    def next_schedule_time(self, chat_id: int | None = None) -> datetime | None:
        """The earliest next fire time of any active schedule (of one chat, given `chat_id`)."""
        q = select(func.min(Schedule.next_fire_at)).where(Schedule.status == ACTIVE)
        if chat_id is not None:
            q = q.where(Schedule.chat_id == chat_id)
        with self._sessions() as s:
            return s.scalar(q)

    def active_without_time(self) -> list[ScheduleRow]:
        """Active schedules with no next fire time (should not exist; repaired at start)."""
        with self._sessions() as s:
            q = select(Schedule).where(Schedule.status == ACTIVE, Schedule.next_fire_at.is_(None))
            return [_row(r) for r in s.scalars(q)]

    def count_by_status(self) -> dict[str, int]:
        """How many schedules are in each status."""
        with self._sessions() as s:
            q = select(Schedule.status, func.count()).group_by(Schedule.status)
            return {str(k): int(n) for k, n in s.execute(q)}

    # ------------------------------------------------------------------ firings

    def add_firing(self, schedule: ScheduleRow, due: datetime, *, snoozed: bool, now: datetime) -> int:
        """Insert one firing (a snooze) of a schedule."""
        with self._sessions.begin() as s:
            f = ScheduleFiring(
                schedule_id=schedule.id,
                user_id=schedule.user_id,
                chat_id=schedule.chat_id,
                due_at=due,
                not_before=due,
                status="due",
                attempts=0,
                missed=0,
                snoozed=snoozed,
                resend=False,
                created_at=now,
            )
            s.add(f)
            s.flush()
            return f.id

    def firing(self, firing_id: int) -> FiringRow | None:
        """One firing with its schedule's data."""
        with self._sessions() as s:
            f = s.get(ScheduleFiring, firing_id)
            if f is None:
                return None
            sched = s.get(Schedule, f.schedule_id)
            assert sched is not None
            return _firing(f, sched)

    def due_firings(
        self, now: datetime, limit: int, exclude: Iterable[int] = (), chat_id: int | None = None
    ) -> list[FiringRow]:
        """Firings waiting to be sent whose time has come, oldest first (of one chat, given `chat_id`)."""
        skip = list(exclude)
        with self._sessions() as s:
            q = (
                _WITH_SCHEDULE.where(ScheduleFiring.status == "due", ScheduleFiring.not_before <= now)
                .order_by(ScheduleFiring.not_before)
                .limit(limit + len(skip))
            )
            if skip:
                q = q.where(ScheduleFiring.id.not_in(skip))
            if chat_id is not None:
                q = q.where(ScheduleFiring.chat_id == chat_id)
            return [_firing(f, sched) for f, sched in s.execute(q)][:limit]

    def next_firing_time(self, chat_id: int | None = None) -> datetime | None:
        """When the earliest waiting firing may be sent (of one chat, given `chat_id`)."""
        q = select(func.min(ScheduleFiring.not_before)).where(ScheduleFiring.status == "due")
        if chat_id is not None:
            q = q.where(ScheduleFiring.chat_id == chat_id)
        with self._sessions() as s:
            return s.scalar(q)

    def set_firings(self, ids: Sequence[int], **values: Any) -> None:
        """Update columns of some firings (one transaction)."""
        if not ids:
            return
        with self._sessions.begin() as s:
            s.execute(update(ScheduleFiring).where(ScheduleFiring.id.in_(list(ids))).values(**values))

    def mark_many(self, results: Sequence[tuple[int, dict[str, Any]]]) -> None:
        """Record the outcome of several firings in one transaction."""
        if not results:
            return
        # Rows with the same columns go in one executemany: a chunk of 100 sent reminders is one statement.
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for firing_id, values in results:
            groups.setdefault(tuple(sorted(values)), []).append(
                {"b_id": firing_id, **{f"b_{k}": v for k, v in values.items()}}
            )
        with self._sessions.begin() as s:
            for columns, rows in groups.items():
                stmt = (
                    update(_FIRINGS)
                    .where(_FIRINGS.c.id == bindparam("b_id"))
                    .values({c: bindparam(f"b_{c}") for c in columns})
                )
                s.connection().execute(stmt, rows)

    def firings_in(self, status: str) -> list[FiringRow]:
        """Every firing in one status (at start: the ones cut by a restart while sending)."""
        with self._sessions() as s:
            q = _WITH_SCHEDULE.where(ScheduleFiring.status == status)
            return [_firing(f, sched) for f, sched in s.execute(q)]

    def cancel_pending(self, schedule_ids: Sequence[int] | None = None, chat_id: int | None = None) -> int:
        """Cancel waiting firings of some schedules or of a chat."""
        conds = [ScheduleFiring.status == "due"]
        if schedule_ids is not None:
            conds.append(ScheduleFiring.schedule_id.in_(list(schedule_ids)))
        if chat_id is not None:
            conds.append(ScheduleFiring.chat_id == chat_id)
        with self._sessions.begin() as s:
            res = s.execute(update(ScheduleFiring).where(and_(*conds)).values(status="cancelled"))
            return int(res.rowcount or 0)  # type: ignore[attr-defined]

    def previous_error(self, schedule_id: int, firing_id: int) -> str | None:
        """The error of the schedule's firing before `firing_id` (None: it had none, or there is none)."""
        with self._sessions() as s:
            q = (
                select(ScheduleFiring.error)
                .where(ScheduleFiring.schedule_id == schedule_id, ScheduleFiring.id < firing_id)
                .order_by(ScheduleFiring.id.desc())
                .limit(1)
            )
            return s.scalar(q)

    def firings_of(self, schedule_id: int) -> list[FiringRow]:
        """Every firing of one schedule, oldest first."""
        with self._sessions() as s:
            q = _WITH_SCHEDULE.where(ScheduleFiring.schedule_id == schedule_id).order_by(ScheduleFiring.id)
            return [_firing(f, sched) for f, sched in s.execute(q)]
