"""The watchdog's events (migration 0031): written by the process that noticed a condition, read by
`python -m bot doctor` (another process)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Engine, Table, func, insert, select, update

from db.models import WatchdogEvent, utcnow

_EVENTS: Table = WatchdogEvent.__table__  # type: ignore[assignment]


@dataclass(frozen=True, slots=True)
class EventRow:
    """A condition a process noticed; `ended` is None while it lasts or when its process died meanwhile."""

    id: int
    condition: str
    process: str
    started: datetime
    ended: datetime | None
    cause: str


def _row(r: object) -> EventRow:
    return EventRow(*r)  # type: ignore[misc]


class WatchdogEvents:
    """The watchdog_events table."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def begin(self, condition: str, process: str, started: datetime, cause: str) -> int:
        """Record a condition's onset; its id."""
        with self._engine.begin() as conn:
            found = conn.execute(
                insert(_EVENTS)
                .values(condition=condition, process=process, started=started, cause=cause[:2000])
                .returning(_EVENTS.c.id)
            ).scalar_one()
        return int(found)

    def end(self, event_id: int, ended: datetime | None = None) -> None:
        """The condition cleared."""
        with self._engine.begin() as conn:
            conn.execute(update(_EVENTS).where(_EVENTS.c.id == event_id).values(ended=ended or utcnow()))

    def end_open_of(self, process: str, ended: datetime | None = None) -> int:
        """Close what a process left open (it stops cleanly while a condition lasts); how many."""
        with self._engine.begin() as conn:
            done = conn.execute(
                update(_EVENTS)
                .where(_EVENTS.c.process == process, _EVENTS.c.ended.is_(None))
                .values(ended=ended or utcnow())
            ).rowcount
        return int(done)

    def since(self, when: datetime) -> list[EventRow]:
        """Every event that started at or after `when`, or still open, oldest first."""
        cols = (
            _EVENTS.c.id,
            _EVENTS.c.condition,
            _EVENTS.c.process,
            _EVENTS.c.started,
            _EVENTS.c.ended,
            _EVENTS.c.cause,
        )
        with self._engine.connect() as conn:
            rows = conn.execute(
                select(*cols)
                .where((_EVENTS.c.started >= when) | _EVENTS.c.ended.is_(None))
                .order_by(_EVENTS.c.started, _EVENTS.c.id)
            ).all()
        return [_row(r) for r in rows]

    def recent(self, days: float = 7.0, now: datetime | None = None) -> list[EventRow]:
        """The events of the last `days` days (and every open one)."""
        return self.since((now or utcnow()) - timedelta(days=days))

    def count(self) -> int:
        """Every event ever recorded."""
        with self._engine.connect() as conn:
            return int(conn.execute(select(func.count()).select_from(_EVENTS)).scalar_one())
