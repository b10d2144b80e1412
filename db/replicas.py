"""Several bot processes on one database: who is alive, who drives which chat, who runs which job, and
which Telegram updates were already handled (migration 0014).

Liveness is a heartbeat row per process; a lease (of a chat or a job) is held by a process id and is only
worth something while that process is alive, so nothing has to be renewed per lease and a dead process's
chats and jobs are free the moment its heartbeat is older than the lease time. Claims are single
INSERT ... ON CONFLICT DO UPDATE ... WHERE statements: the database decides who wins, on SQLite (one writer)
and on PostgreSQL (the row lock of the conflicting row) alike. Times are the processes' own UTC clocks
(NTP-close; the lease time is seconds).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Engine, Table, and_, delete, exists, func, not_, or_, select, update
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


class Cluster:
    """The replica, lease and update-dedup tables of one database."""

    def __init__(self, engine: Engine, lease: timedelta) -> None:
        self._engine = engine
        self.lease = lease
        dialect = engine.dialect.name
        # The one dialect difference: both have INSERT ... ON CONFLICT, under their own construct.
        self._insert: Any = postgresql.insert if dialect == "postgresql" else sqlite.insert

    def _live(self) -> Any:
        """The ids of live processes, as a subquery."""
        return select(_REPLICAS.c.id).where(_REPLICAS.c.heartbeat_at > utcnow() - self.lease)

    # ------------------------------------------------------------------ processes

    def join(self, replica_id: str, host: str, pid: int, pid_start: str) -> None:
        """Register this process."""
        now = utcnow()
        row = {"id": replica_id, "host": host, "pid": pid, "pid_start": pid_start}
        with self._engine.begin() as conn:
            conn.execute(_REPLICAS.insert().values(**row, started_at=now, heartbeat_at=now))

    def beat(self, replica_id: str) -> bool:
        """Renew this process's heartbeat; False when its row was gone (it had been taken for dead)."""
        with self._engine.begin() as conn:
            done = conn.execute(
                update(_REPLICAS).where(_REPLICAS.c.id == replica_id).values(heartbeat_at=utcnow())
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
                    _REPLICAS.c.id == replica_id, _REPLICAS.c.heartbeat_at > utcnow() - self.lease
                )
            ).first()
        return found is not None

    def prune(self, before: datetime) -> tuple[int, int]:
        """Housekeeping: forget processes dead long ago and updates seen before `before`."""
        with self._engine.connect() as conn:
            gone = [
                r[0]
                for r in conn.execute(
                    select(_REPLICAS.c.id).where(_REPLICAS.c.heartbeat_at < utcnow() - 10 * self.lease)
                ).all()
            ]
        self.forget(gone)
        with self._engine.begin() as conn:
            seen = conn.execute(delete(_SEEN).where(_SEEN.c.seen_at < before)).rowcount
        return len(gone), seen

    # ------------------------------------------------------------------ updates

    def first_delivery(self, update_id: int) -> bool:
        """Record a Telegram update; False when it was already handled (a duplicate or retried delivery)."""
        stmt = self._insert(_SEEN).values(update_id=update_id, seen_at=utcnow())
        stmt = stmt.on_conflict_do_nothing(index_elements=["update_id"]).returning(_SEEN.c.update_id)
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

    def release_chat(self, chat_id: int, replica_id: str, *, only_if_idle: bool = False) -> bool:
        """Let a chat go; with `only_if_idle`, only when nothing waits in its inbox (else the caller keeps
        driving it: a message stored by another process that found the chat taken is not stranded)."""
        cond = and_(_CHATS.c.chat_id == chat_id, _CHATS.c.holder == replica_id)
        if only_if_idle:
            cond = and_(cond, not_(exists().where(_INBOX.c.chat_id == chat_id)))
        with self._engine.begin() as conn:
            return bool(conn.execute(delete(_CHATS).where(cond)).rowcount)

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
