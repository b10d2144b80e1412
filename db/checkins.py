"""Check-ins (core_tools/checkin/): each user's opt-in row, and the preflight's reads of a user's own rows.

The preflight reads, for many users at once (`preflight_inputs`, a few queries per batch of users, each an
IN over the batch): mid-term memories near their expiry or not updated for a while, active reminders due
within a day, tasks that failed or were paused, and the memory self-check's counts. Nothing here writes
memory; the button actions are in core_tools/checkin/service.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Table, and_, bindparam, or_, select, update
from sqlalchemy.orm import Session, sessionmaker

from db.models import Checkin, Memory, MemoryCheck, Schedule, utcnow

KIND = "checkin"  # the kind of a check-in's row in `schedules`
CHUNK = 500  # users per IN list


@dataclass(frozen=True)
class CheckinRow:
    """A check-in as plain data."""

    user_id: int
    schedule_id: int | None
    enabled: bool
    cadence: str
    weekday: int | None
    at_local: str
    digest: bool
    level: int
    ignored: int
    awaiting: bool
    last_run_at: datetime | None
    last_sent_at: datetime | None
    last_message_id: int | None
    last_text: str | None
    last_items: list[Any] | None
    last_cost: float | None


_FIELDS = tuple(CheckinRow.__dataclass_fields__)
_TABLE: Table = Checkin.__table__  # type: ignore[assignment]


def _row(c: Checkin) -> CheckinRow:
    return CheckinRow(**{f: getattr(c, f) for f in _FIELDS})


@dataclass(frozen=True)
class MidMemory:
    """A mid-term memory the preflight looks at."""

    public_id: str
    category: str
    content: str
    certainty: float | None
    expires_at: datetime | None
    updated_at: datetime


@dataclass(frozen=True)
class ScheduleItem:
    """A reminder or task the preflight looks at."""

    id: int
    kind: str
    text: str
    status: str
    pause_reason: str | None
    failures: int
    next_fire_at: datetime | None
    repeating: bool


@dataclass
class PreflightInputs:
    """One user's rows that a check-in may speak of."""

    user_id: int
    memories: list[MidMemory] = field(default_factory=list)
    reminders: list[ScheduleItem] = field(default_factory=list)
    tasks: list[ScheduleItem] = field(default_factory=list)
    check: tuple[int, int] | None = None  # (memories asked for, found) of a self-check that missed some


def preflight_inputs(
    s: Session, user_ids: Sequence[int], now: datetime, *, near: timedelta, quiet: timedelta
) -> dict[int, PreflightInputs]:
    """The preflight's rows of each user (their own rows only), four queries per CHUNK users."""
    out = {u: PreflightInputs(u) for u in user_ids}
    for i in range(0, len(user_ids), CHUNK):
        chunk = list(user_ids[i : i + CHUNK])
        mems = select(
            Memory.user_id,
            Memory.public_id,
            Memory.category,
            Memory.content,
            Memory.certainty,
            Memory.expires_at,
            Memory.updated_at,
        ).where(
            Memory.user_id.in_(chunk),
            Memory.layer == "mid",
            Memory.superseded_by.is_(None),
            or_(Memory.expires_at.is_(None), Memory.expires_at > now),
            or_(Memory.expires_at <= now + near, Memory.updated_at <= now - quiet),
        )
        for r in s.execute(mems):
            out[r.user_id].memories.append(
                MidMemory(r.public_id, r.category, r.content, r.certainty, r.expires_at, r.updated_at)
            )
        scheds = select(
            Schedule.user_id,
            Schedule.id,
            Schedule.kind,
            Schedule.text,
            Schedule.status,
            Schedule.pause_reason,
            Schedule.failures,
            Schedule.next_fire_at,
            Schedule.repeat,
        ).where(
            Schedule.user_id.in_(chunk),
            or_(
                and_(
                    Schedule.kind == "message",
                    Schedule.status == "active",
                    Schedule.next_fire_at <= now + timedelta(days=1),
                ),
                and_(
                    Schedule.kind == "task",
                    or_(
                        Schedule.status == "paused", and_(Schedule.status == "active", Schedule.failures > 0)
                    ),
                ),
            ),
        )
        for r2 in s.execute(scheds):
            item = ScheduleItem(
                r2.id,
                r2.kind,
                r2.text,
                r2.status,
                r2.pause_reason,
                r2.failures,
                r2.next_fire_at,
                r2.repeat is not None,
            )
            (out[r2.user_id].reminders if r2.kind == "message" else out[r2.user_id].tasks).append(item)
        checks = select(MemoryCheck.user_id, MemoryCheck.memories, MemoryCheck.findable).where(
            MemoryCheck.user_id.in_(chunk), MemoryCheck.findable < MemoryCheck.memories
        )
        for c in s.execute(checks):
            out[c.user_id].check = (int(c.memories), int(c.findable))
    return out


class Checkins:
    """Queries over `checkins`; every method is one short transaction."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self.sessions = sessions

    def get(self, user_id: int) -> CheckinRow | None:
        """A user's check-in row (on or off), or None before the first /checkin."""
        with self.sessions() as s:
            row = s.get(Checkin, user_id)
            return _row(row) if row is not None else None

    def many(self, user_ids: Sequence[int]) -> dict[int, CheckinRow]:
        """The check-in rows of several users."""
        out: dict[int, CheckinRow] = {}
        with self.sessions() as s:
            for i in range(0, len(user_ids), CHUNK):
                q = select(Checkin).where(Checkin.user_id.in_(list(user_ids[i : i + CHUNK])))
                out.update({r.user_id: _row(r) for r in s.scalars(q)})
        return out

    def put(self, user_id: int, **values: Any) -> CheckinRow:
        """Create or change a user's check-in row."""
        now = utcnow()
        with self.sessions.begin() as s:
            row = s.get(Checkin, user_id)
            if row is None:
                defaults: dict[str, Any] = {"enabled": True, "digest": False, "level": 0, "ignored": 0}
                row = Checkin(user_id=user_id, created_at=now, **{**defaults, **values})
                s.add(row)
            else:
                for key, value in values.items():
                    setattr(row, key, value)
            row.updated_at = now
            s.flush()
            return _row(row)

    def put_many(self, changes: dict[int, dict[str, Any]]) -> None:
        """Change several users' rows in one transaction (an executemany per set of columns)."""
        if not changes:
            return
        now = utcnow()
        groups: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for user_id, values in changes.items():
            groups.setdefault(tuple(sorted(values)), []).append(
                {"b_user": user_id, "b_updated_at": now, **{f"b_{k}": v for k, v in values.items()}}
            )
        with self.sessions.begin() as s:
            for columns, params in groups.items():
                stmt = (
                    update(_TABLE)
                    .where(_TABLE.c.user_id == bindparam("b_user"))
                    .values({c: bindparam(f"b_{c}") for c in (*columns, "updated_at")})
                )
                s.connection().execute(stmt, params)

    def inputs(
        self, user_ids: Sequence[int], now: datetime, *, near: timedelta, quiet: timedelta
    ) -> dict[int, PreflightInputs]:
        """`preflight_inputs` in one read transaction."""
        with self.sessions() as s:
            return preflight_inputs(s, user_ids, now, near=near, quiet=quiet)
