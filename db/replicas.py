"""Several bot processes on one database: who is alive, who drives which chat, who runs which job, and
which Telegram updates were already handled (migration 0014).

Liveness is a heartbeat row per process; a lease (of a chat or a job) is held by a process id and is only
worth something while that process is alive, so nothing has to be renewed per lease and a dead process's
chats and jobs are free the moment its heartbeat is older than the lease time. Claims are single
INSERT ... ON CONFLICT DO UPDATE ... WHERE statements: the database decides who wins, on SQLite (one writer)
and on PostgreSQL (the row lock of the conflicting row) alike. Heartbeats are written and judged by one
clock: PostgreSQL's own (processes on several machines need not agree on the time), the process's on SQLite
(one process, one machine).

Telegram updates are remembered per bot (the numeric id in its token) for `dedup_window`: another bot's
update with the same id (a token switch) is not a duplicate, nor is an id seen longer ago than any
duplicate can arrive (Telegram keeps an update for at most 24 hours; after a week without updates it
starts again from a random id).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import (
    DateTime,
    Engine,
    Table,
    and_,
    create_engine,
    delete,
    exists,
    func,
    not_,
    or_,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from db.models import ChatLease, InboxMessage, JobLease, Message, Replica, UpdateSeen, utcnow

_REPLICAS: Table = Replica.__table__  # type: ignore[assignment]
_CHATS: Table = ChatLease.__table__  # type: ignore[assignment]
_JOBS: Table = JobLease.__table__  # type: ignore[assignment]
_SEEN: Table = UpdateSeen.__table__  # type: ignore[assignment]
_INBOX: Table = InboxMessage.__table__  # type: ignore[assignment]
_MESSAGES: Table = Message.__table__  # type: ignore[assignment]


@dataclass(frozen=True)
class ReplicaRow:
    """A process as registered."""

    id: str
    host: str
    pid: int
    pid_start: str
    heartbeat_at: datetime


@dataclass(frozen=True)
class RunningTurn:
    """The turn a chat runs somewhere, as the chat's lease says."""

    holder: str
    turn: int
    owner: int | None


Released = Literal["released", "waiting", "not held"]

# Telegram keeps an update it could not deliver for at most 24 hours, retrying a webhook until it gets a 200
# and handing it out again to getUpdates until it is confirmed: a duplicate arrives within a day of the
# first delivery. The hour on top covers clocks that differ between processes.
DEDUP_WINDOW = timedelta(hours=25)


class Cluster:
    """The replica, lease and update-dedup tables of one database."""

    def __init__(self, engine: Engine, lease: timedelta, *, dedup_window: timedelta = DEDUP_WINDOW) -> None:
        self._engine = engine
        self.lease = lease
        self.dedup_window = dedup_window
        self._postgres = engine.dialect.name == "postgresql"
        # The one dialect difference: both have INSERT ... ON CONFLICT, under their own construct.
        self._insert: Any = postgresql.insert if self._postgres else sqlite.insert

    def with_own_connection(self) -> Cluster:
        """The same tables through a connection of their own (the heartbeat's: it must not wait for a free
        connection of the shared pool). SQLite has one process and a local file: the same engine."""
        if not self._postgres:
            return self
        engine = create_engine(self._engine.url, pool_size=1, max_overflow=0, pool_pre_ping=True)
        return Cluster(engine, self.lease, dedup_window=self.dedup_window)

    def close(self) -> None:
        """Close a connection made by `with_own_connection`."""
        self._engine.dispose()

    def _now(self) -> Any:
        """Now, by the clock heartbeats are judged by (naive UTC on PostgreSQL's clock; see the module)."""
        if self._postgres:
            return func.timezone("UTC", func.now(), type_=DateTime())
        return utcnow()

    def _live(self) -> Any:
        """The ids of live processes, as a subquery."""
        return select(_REPLICAS.c.id).where(_REPLICAS.c.heartbeat_at > self._now() - self.lease)

    # ------------------------------------------------------------------ processes

    def join(self, replica_id: str, host: str, pid: int, pid_start: str) -> None:
        """Register this process."""
        row = {"id": replica_id, "host": host, "pid": pid, "pid_start": pid_start}
        with self._engine.begin() as conn:
            conn.execute(_REPLICAS.insert().values(**row, started_at=utcnow(), heartbeat_at=self._now()))

    def beat(self, replica_id: str) -> bool:
        """Renew this process's heartbeat; False when its row was gone (it had been taken for dead)."""
        with self._engine.begin() as conn:
            done = conn.execute(
                update(_REPLICAS).where(_REPLICAS.c.id == replica_id).values(heartbeat_at=self._now())
            ).rowcount
        return bool(done)

    def on_host(self, host: str) -> list[ReplicaRow]:
        """The processes registered from this host (to find this host's dead ones at start)."""
        with self._engine.connect() as conn:
            rows = conn.execute(
                select(
                    _REPLICAS.c.id,
                    _REPLICAS.c.host,
                    _REPLICAS.c.pid,
                    _REPLICAS.c.pid_start,
                    _REPLICAS.c.heartbeat_at,
                ).where(_REPLICAS.c.host == host)
            ).all()
        return [ReplicaRow(*r) for r in rows]

    def forget(self, replica_ids: list[str]) -> None:
        """Processes known to be gone (or leaving): drop them and everything they held."""
        if not replica_ids:
            return
        with self._engine.begin() as conn:
            conn.execute(delete(_CHATS).where(_CHATS.c.holder.in_(replica_ids)))
            conn.execute(delete(_JOBS).where(_JOBS.c.holder.in_(replica_ids)))
            conn.execute(delete(_REPLICAS).where(_REPLICAS.c.id.in_(replica_ids)))

    def alive(self, replica_id: str) -> bool:
        """Whether a process is alive (its heartbeat is recent)."""
        with self._engine.connect() as conn:
            found = conn.execute(
                select(_REPLICAS.c.id).where(
                    _REPLICAS.c.id == replica_id, _REPLICAS.c.heartbeat_at > self._now() - self.lease
                )
            ).first()
        return found is not None

    def prune(self) -> tuple[int, int]:
        """Housekeeping: forget processes dead long ago and updates seen before the dedup window."""
        with self._engine.connect() as conn:
            gone = [
                r[0]
                for r in conn.execute(
                    select(_REPLICAS.c.id).where(_REPLICAS.c.heartbeat_at < self._now() - 10 * self.lease)
                ).all()
            ]
        self.forget(gone)
        with self._engine.begin() as conn:
            seen = conn.execute(delete(_SEEN).where(_SEEN.c.seen_at < utcnow() - self.dedup_window)).rowcount
        return len(gone), seen

    # ------------------------------------------------------------------ updates

    def first_delivery(self, bot_id: int, update_id: int) -> bool:
        """Record a Telegram update of bot `bot_id`; False when it was already handled (a duplicate or a
        retried delivery within the dedup window)."""
        now = utcnow()
        stmt = self._insert(_SEEN).values(bot_id=bot_id, update_id=update_id, seen_at=now)
        # An id remembered from longer ago than a duplicate can come is a new update: taken, not dropped
        # (pruning runs now and then, so an expired row may still be there).
        stmt = stmt.on_conflict_do_update(
            index_elements=["bot_id", "update_id"],
            set_={"seen_at": stmt.excluded.seen_at},
            where=_SEEN.c.seen_at < now - self.dedup_window,
        ).returning(_SEEN.c.update_id)
        # RETURNING, not rowcount: psycopg reports no reliable rowcount for an upsert that did nothing.
        with self._engine.begin() as conn:
            return conn.execute(stmt).first() is not None

    # ------------------------------------------------------------------ jobs

    def claim_job(self, name: str, replica_id: str) -> bool:
        """Hold (or keep holding) a periodic job: True when this process is its holder now."""
        stmt = self._insert(_JOBS).values(name=name, holder=replica_id, since=utcnow())
        stmt = stmt.on_conflict_do_update(
            index_elements=["name"],
            set_={"holder": replica_id, "since": stmt.excluded.since},
            where=or_(_JOBS.c.holder == replica_id, _JOBS.c.holder.not_in(self._live())),
        )
        with self._engine.begin() as conn:
            conn.execute(stmt)
            holder = conn.execute(select(_JOBS.c.holder).where(_JOBS.c.name == name)).scalar()
        return holder == replica_id

    # ------------------------------------------------------------------ chats

    def claim_chat(self, chat_id: int, replica_id: str) -> bool:
        """Take a chat that no live process drives; True when this process drives it now."""
        stmt = self._insert(_CHATS).values(chat_id=chat_id, holder=replica_id, since=utcnow())
        stmt = stmt.on_conflict_do_update(
            index_elements=["chat_id"],
            set_={
                "holder": replica_id,
                "since": stmt.excluded.since,
                "turn": None,
                "turn_owner": None,
                "stop": None,
            },
            where=_CHATS.c.holder.not_in(self._live()),
        ).returning(_CHATS.c.chat_id)
        with self._engine.begin() as conn:
            return conn.execute(stmt).first() is not None

    def release_chat(self, chat_id: int, replica_id: str, *, only_if_idle: bool = False) -> Released:
        """Let a chat go: "released"; with `only_if_idle`, "waiting" when a message waits in its inbox (the
        caller keeps driving it: a message stored by another process that found the chat taken is not
        stranded); "not held" when this process no longer held it (taken over while it was silent)."""
        mine = and_(_CHATS.c.chat_id == chat_id, _CHATS.c.holder == replica_id)
        cond = and_(mine, not_(exists().where(_INBOX.c.chat_id == chat_id))) if only_if_idle else mine
        with self._engine.begin() as conn:
            if conn.execute(delete(_CHATS).where(cond)).rowcount:
                return "released"
            held = conn.execute(select(_CHATS.c.chat_id).where(mine)).first() is not None
        return "waiting" if held else "not held"

    def chats_of(self, replica_id: str) -> set[int]:
        """The chats a process holds in the database. On PostgreSQL each row is locked on the way, so a
        claim by another process that is still under way is waited for and seen."""
        with self._engine.begin() as conn:
            rows = conn.execute(
                select(_CHATS.c.chat_id).where(_CHATS.c.holder == replica_id).with_for_update()
            ).all()
        return {int(r[0]) for r in rows}

    def release_all(self, replica_id: str) -> None:
        """Let every chat of this process go (it is stopping)."""
        with self._engine.begin() as conn:
            conn.execute(delete(_CHATS).where(_CHATS.c.holder == replica_id))

    def orphans(self, limit: int) -> list[int]:
        """Chats with messages waiting, or a turn left pending by a dead process, that nobody alive drives."""
        if limit <= 0:
            return []
        driven = select(_CHATS.c.chat_id).where(_CHATS.c.holder.in_(self._live()))
        waiting = select(_INBOX.c.chat_id).where(_INBOX.c.chat_id.not_in(driven))
        pending = select(_MESSAGES.c.chat_id).where(
            _MESSAGES.c.status == "pending", _MESSAGES.c.role == "user", _MESSAGES.c.chat_id.not_in(driven)
        )
        with self._engine.connect() as conn:
            first = [
                r[0]
                for r in conn.execute(
                    waiting.group_by(_INBOX.c.chat_id).order_by(func.min(_INBOX.c.id)).limit(limit)
                ).all()
            ]
            rest = [r[0] for r in conn.execute(pending.distinct().limit(limit)).all()]
        return list(dict.fromkeys([*first, *rest]))[:limit]

    def start_turn(self, chat_id: int, replica_id: str, turn: int, owner: int) -> None:
        """Publish the turn this process runs in a chat (for a /stop that reaches another process)."""
        with self._engine.begin() as conn:
            conn.execute(
                update(_CHATS)
                .where(_CHATS.c.chat_id == chat_id, _CHATS.c.holder == replica_id)
                .values(turn=turn, turn_owner=owner, stop=None)
            )

    def end_turn(self, chat_id: int, replica_id: str) -> None:
        """The chat's turn ended."""
        with self._engine.begin() as conn:
            conn.execute(
                update(_CHATS)
                .where(_CHATS.c.chat_id == chat_id, _CHATS.c.holder == replica_id)
                .values(turn=None, turn_owner=None, stop=None)
            )

    def running(self, chat_id: int) -> RunningTurn | None:
        """The turn a live process runs in a chat, if any."""
        with self._engine.connect() as conn:
            row = conn.execute(
                select(_CHATS.c.holder, _CHATS.c.turn, _CHATS.c.turn_owner).where(
                    _CHATS.c.chat_id == chat_id, _CHATS.c.turn.is_not(None), _CHATS.c.holder.in_(self._live())
                )
            ).first()
        return None if row is None else RunningTurn(row[0], int(row[1]), row[2])

    def request_stop(self, chat_id: int, turn: int) -> bool:
        """Ask the process running a chat's turn to stop it."""
        with self._engine.begin() as conn:
            return bool(
                conn.execute(
                    update(_CHATS).where(_CHATS.c.chat_id == chat_id, _CHATS.c.turn == turn).values(stop=turn)
                ).rowcount
            )

    def stops_for(self, replica_id: str) -> list[tuple[int, int]]:
        """(chat, turn) pairs this process was asked to stop."""
        with self._engine.connect() as conn:
            rows = conn.execute(
                select(_CHATS.c.chat_id, _CHATS.c.stop).where(
                    _CHATS.c.holder == replica_id, _CHATS.c.stop.is_not(None)
                )
            ).all()
        return [(int(r[0]), int(r[1])) for r in rows]
