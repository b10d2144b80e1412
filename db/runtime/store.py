"""The runtime's tables on one database shared by any number of bot processes: who is alive, who drives
which chat (and the turn it runs, and a /stop asked for it), who runs which job, and which Telegram
updates were already handled (migration 0014).

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

A plain message costs one transaction here (`arrive`): its update is recorded as seen, it is queued, and
its chat is claimed when no process here holds it, so a duplicate delivery is dropped and the message is
queued exactly when its update is first seen. The turn a chat runs is published and cleared in the
transactions that store the turn's messages and its answer (`publish_turn`, `clear_turn`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from sqlalchemy import (
    Connection,
    DateTime,
    Engine,
    Table,
    and_,
    bindparam,
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

from db import connections
from db.conversation_statements import SET_STATUS_RUN
from db.models import ChatLease, InboxMessage, JobLease, Message, Replica, UpdateSeen, utcnow
from db.prepared import Prepared
from db.runtime.inbox import Entry, insert_entry

_REPLICAS: Table = Replica.__table__  # type: ignore[assignment]
_CHATS: Table = ChatLease.__table__  # type: ignore[assignment]
_JOBS: Table = JobLease.__table__  # type: ignore[assignment]
_SEEN: Table = UpdateSeen.__table__  # type: ignore[assignment]
_INBOX: Table = InboxMessage.__table__  # type: ignore[assignment]
_MESSAGES: Table = Message.__table__  # type: ignore[assignment]

# The same on both databases, built once.
_PUBLISH = (
    update(_CHATS)
    .where(_CHATS.c.chat_id == bindparam("cid"), _CHATS.c.holder == bindparam("me"))
    .values(turn=bindparam("turn"), turn_owner=bindparam("owner"), stop=None)
)
_CLEAR = (
    update(_CHATS)
    .where(
        _CHATS.c.chat_id == bindparam("cid"),
        _CHATS.c.holder == bindparam("me"),
        _CHATS.c.turn == bindparam("ended"),
    )
    .values(turn=None, turn_owner=None, stop=None)
)
_PUBLISH_RUN = Prepared(_PUBLISH)
_CLEAR_RUN = Prepared(_CLEAR)
_PENDING = select(_MESSAGES.c.id, _MESSAGES.c.user_id, _MESSAGES.c.chat_id, _MESSAGES.c.content).where(
    _MESSAGES.c.role == "user", _MESSAGES.c.status == "pending", _MESSAGES.c.chat_id == bindparam("cid")
)
_MINE = and_(_CHATS.c.chat_id == bindparam("cid"), _CHATS.c.holder == bindparam("me"))
_RELEASE = delete(_CHATS).where(_MINE)
_RELEASE_IF_IDLE = delete(_CHATS).where(_MINE, not_(exists().where(_INBOX.c.chat_id == bindparam("cid"))))
_HELD = select(_CHATS.c.chat_id).where(_MINE)
_STOPS_FOR = select(_CHATS.c.chat_id, _CHATS.c.stop).where(
    _CHATS.c.holder == bindparam("me"), _CHATS.c.stop.is_not(None)
)
_WAITING_MINE = (
    select(_INBOX.c.chat_id)
    .join(_CHATS, _CHATS.c.chat_id == _INBOX.c.chat_id)
    .where(_CHATS.c.holder == bindparam("me"))
    .distinct()
)


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


@dataclass(frozen=True)
class TurnMark:
    """The turn a process runs in a chat it holds, published on the chat's lease for a /stop that reaches
    another process (`turn` is unique across processes)."""

    chat_id: int
    holder: str
    turn: int
    owner: int


@dataclass(frozen=True)
class PendingMessage:
    """A user message whose turn never finished (the process died mid-turn)."""

    id: int
    user_id: int
    chat_id: int
    content: str


@dataclass(frozen=True)
class Claimed:
    """A chat taken from the database, and the messages whose turn its previous holder could not finish
    (now marked interrupted: the new holder tells the chat)."""

    chat_id: int
    interrupted: list[PendingMessage] = field(default_factory=list)


@dataclass(frozen=True)
class Arrival:
    """What storing an arriving message did: its inbox id (None: its update was a duplicate, nothing was
    stored) and the claim of its chat, when one was asked and won."""

    inbox_id: int | None
    claimed: Claimed | None = None


Released = Literal["released", "waiting", "not held"]

# Telegram keeps an update it could not deliver for at most 24 hours, retrying a webhook until it gets a 200
# and handing it out again to getUpdates until it is confirmed: a duplicate arrives within a day of the
# first delivery. The hour on top covers clocks that differ between processes.
DEDUP_WINDOW = timedelta(hours=25)


def publish_turn(conn: Connection, mark: TurnMark) -> None:
    """Publish the turn a process runs in its chat, in the caller's transaction (the one that stores the
    turn's messages)."""
    _PUBLISH_RUN.run(conn, {"cid": mark.chat_id, "me": mark.holder, "turn": mark.turn, "owner": mark.owner})


def clear_turn(conn: Connection, mark: TurnMark) -> None:
    """The turn ended, in the caller's transaction (the one that stores its outcome); a /stop asked for it
    goes with it."""
    _CLEAR_RUN.run(conn, {"cid": mark.chat_id, "me": mark.holder, "ended": mark.turn})


class RuntimeStore:
    """The replica, lease, stop and update-dedup tables of one database (and the inbox, for `arrive`)."""

    def __init__(self, engine: Engine, lease: timedelta, *, dedup_window: timedelta = DEDUP_WINDOW) -> None:
        self._engine = engine
        self.lease = lease
        self.dedup_window = dedup_window
        self._postgres = engine.dialect.name == "postgresql"
        # The one dialect difference: both have INSERT ... ON CONFLICT, under their own construct.
        self._insert: Any = postgresql.insert if self._postgres else sqlite.insert
        # The hot statements, built once for this database (their clock differs, see `_now`).
        live = select(_REPLICAS.c.id).where(self._alive())
        self._live_ids = live
        seen = self._insert(_SEEN).values(
            bot_id=bindparam("bot"), update_id=bindparam("upd"), seen_at=bindparam("now")
        )
        # An id remembered from longer ago than a duplicate can come is a new update: taken, not dropped
        # (pruning runs now and then, so an expired row may still be there). RETURNING, not rowcount:
        # psycopg reports no reliable rowcount for an upsert that did nothing.
        self._first_delivery = seen.on_conflict_do_update(
            index_elements=["bot_id", "update_id"],
            set_={"seen_at": seen.excluded.seen_at},
            where=_SEEN.c.seen_at < bindparam("expired"),
        ).returning(_SEEN.c.update_id)
        self._first_delivery_run = Prepared(self._first_delivery)
        claim = self._insert(_CHATS).values(
            chat_id=bindparam("cid"), holder=bindparam("me"), since=bindparam("now")
        )
        # A chat held by no live process is taken; so is one the database says this process holds while
        # nothing here does (a release that failed): only this process could be using it, and it is not.
        self._claim = claim.on_conflict_do_update(
            index_elements=["chat_id"],
            set_={
                "holder": claim.excluded.holder,
                "since": claim.excluded.since,
                "turn": None,
                "turn_owner": None,
                "stop": None,
            },
            where=or_(_CHATS.c.holder.not_in(live), _CHATS.c.holder == bindparam("me")),
        ).returning(_CHATS.c.chat_id)
        self._running = select(_CHATS.c.holder, _CHATS.c.turn, _CHATS.c.turn_owner).where(
            _CHATS.c.chat_id == bindparam("cid"), _CHATS.c.turn.is_not(None), _CHATS.c.holder.in_(live)
        )

    @property
    def over_network(self) -> bool:
        """Whether a call waits on a database server (PostgreSQL), not on a local file (SQLite)."""
        return self._postgres

    def with_own_connection(self) -> RuntimeStore:
        """The same tables through a connection of their own (the heartbeat's: it must not wait for a free
        connection of the shared pool). SQLite has one process and a local file: the same engine."""
        if not self._postgres:
            return self
        engine = create_engine(self._engine.url, pool_size=1, max_overflow=0, pool_pre_ping=True)
        return RuntimeStore(engine, self.lease, dedup_window=self.dedup_window)

    def close(self) -> None:
        """Close a connection made by `with_own_connection`."""
        self._engine.dispose()

    def _now(self) -> Any:
        """Now, by the clock heartbeats are judged by (naive UTC on PostgreSQL's clock; see the module)."""
        if self._postgres:
            return func.timezone("UTC", func.now(), type_=DateTime())
        return utcnow()

    def _alive(self) -> Any:
        """The condition "the heartbeat is younger than the lease": PostgreSQL judges by its own clock,
        SQLite by the `alive_after` parameter (`_params`)."""
        if self._postgres:
            return _REPLICAS.c.heartbeat_at > self._now() - self.lease
        return _REPLICAS.c.heartbeat_at > bindparam("alive_after")

    def _params(self, **values: Any) -> dict[str, Any]:
        """Parameters of a statement that judges liveness, with this process's clock on SQLite."""
        if not self._postgres:
            values["alive_after"] = utcnow() - self.lease
        return values

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
        return [ReplicaRow(**r._mapping) for r in rows]

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
                select(_REPLICAS.c.id).where(_REPLICAS.c.id == replica_id, self._alive()), self._params()
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

    # ------------------------------------------------------------------ updates and arrivals

    def first_delivery(self, bot_id: int, update_id: int) -> bool:
        """Record a Telegram update of bot `bot_id`; False when it was already handled (a duplicate or a
        retried delivery within the dedup window)."""
        with self._engine.begin() as conn:
            return self._first_delivery_in(conn, bot_id, update_id)

    def _first_delivery_in(self, conn: Connection, bot_id: int, update_id: int) -> bool:
        now = utcnow()
        params = {"bot": bot_id, "upd": update_id, "now": now, "expired": now - self.dedup_window}
        return self._first_delivery_run.first(conn, params) is not None

    def arrive(self, entry: Entry, *, update_of: int | None = None, claim_for: str | None = None) -> Arrival:
        """Queue a message that just arrived, in one transaction with what comes with it: with `update_of`
        (the bot's id) its update is recorded as seen first, and a duplicate stores nothing; with
        `claim_for` (a process id) its chat is claimed for that process when no live one holds it."""
        with connections.begin(self._engine) as conn:
            duplicate = (
                update_of is not None
                and entry.update_id is not None
                and not self._first_delivery_in(conn, update_of, entry.update_id)
            )
            if duplicate:
                return Arrival(None)
            inbox_id = insert_entry(conn, entry)
            claimed = (
                self._claim_in(conn, entry.speaker.chat_id, claim_for) if claim_for is not None else None
            )
        return Arrival(inbox_id, claimed)

    # ------------------------------------------------------------------ jobs

    def claim_job(self, name: str, replica_id: str) -> bool:
        """Hold (or keep holding) a periodic job: True when this process is its holder now."""
        stmt = self._insert(_JOBS).values(name=name, holder=replica_id, since=utcnow())
        stmt = stmt.on_conflict_do_update(
            index_elements=["name"],
            set_={"holder": replica_id, "since": stmt.excluded.since},
            where=or_(_JOBS.c.holder == replica_id, _JOBS.c.holder.not_in(self._live_ids)),
        )
        with self._engine.begin() as conn:
            conn.execute(stmt, self._params())
            holder = conn.execute(select(_JOBS.c.holder).where(_JOBS.c.name == name)).scalar()
        return holder == replica_id

    # ------------------------------------------------------------------ chats

    def claim_chat(self, chat_id: int, replica_id: str) -> Claimed | None:
        """Take a chat that no live process drives; the claim when this process drives it now (with the
        messages its previous holder left pending, marked interrupted), else None."""
        with self._engine.begin() as conn:
            return self._claim_in(conn, chat_id, replica_id)

    def _claim_in(self, conn: Connection, chat_id: int, replica_id: str) -> Claimed | None:
        params = self._params(cid=chat_id, me=replica_id, now=utcnow())
        if conn.execute(self._claim, params).first() is None:
            return None
        # A turn left pending in it was cut when its process died (or a release failed here): its user is
        # told by the new holder, once.
        pending = [
            PendingMessage(int(r.id), int(r.user_id), int(r.chat_id), r.content or "")
            for r in conn.execute(_PENDING, {"cid": chat_id})
        ]
        if pending:
            SET_STATUS_RUN.run_many(conn, [{"mid": p.id, "new_status": "interrupted"} for p in pending])
        return Claimed(chat_id, pending)

    def release_chat(self, chat_id: int, replica_id: str, *, only_if_idle: bool = False) -> Released:
        """Let a chat go: "released"; with `only_if_idle`, "waiting" when a message waits in its inbox (the
        caller keeps driving it: a message stored by another process that found the chat taken is not
        stranded); "not held" when this process no longer held it (taken over while it was silent)."""
        params = {"cid": chat_id, "me": replica_id}
        with self._engine.begin() as conn:
            if conn.execute(_RELEASE_IF_IDLE if only_if_idle else _RELEASE, params).rowcount:
                return "released"
            held = conn.execute(_HELD, params).first() is not None
        return "waiting" if held else "not held"

    def chats_of(self, replica_id: str) -> set[int]:
        """The chats a process holds in the database. On PostgreSQL each row is locked on the way, so a
        claim by another process that is still under way is waited for and seen."""
        with self._engine.begin() as conn:
            rows = conn.execute(
                select(_CHATS.c.chat_id).where(_CHATS.c.holder == replica_id).with_for_update()
            ).all()
        return {int(r[0]) for r in rows}

    def waiting_for(self, replica_id: str) -> set[int]:
        """The chats a process holds that have messages waiting (stored by another process, which found
        the chat taken)."""
        with self._engine.connect() as conn:
            return {int(r[0]) for r in conn.execute(_WAITING_MINE, {"me": replica_id})}

    def release_all(self, replica_id: str) -> None:
        """Let every chat of this process go (it is stopping)."""
        with self._engine.begin() as conn:
            conn.execute(delete(_CHATS).where(_CHATS.c.holder == replica_id))

    def orphans(self, limit: int) -> list[int]:
        """Chats with messages waiting, or a turn left pending by a dead process, that nobody alive drives."""
        if limit <= 0:
            return []
        driven = select(_CHATS.c.chat_id).where(_CHATS.c.holder.in_(self._live_ids))
        waiting = select(_INBOX.c.chat_id).where(_INBOX.c.chat_id.not_in(driven))
        pending = select(_MESSAGES.c.chat_id).where(
            _MESSAGES.c.status == "pending", _MESSAGES.c.role == "user", _MESSAGES.c.chat_id.not_in(driven)
        )
        params = self._params()
        with self._engine.connect() as conn:
            first = [
                r[0]
                for r in conn.execute(
                    waiting.group_by(_INBOX.c.chat_id).order_by(func.min(_INBOX.c.id)).limit(limit), params
                ).all()
            ]
            rest = [r[0] for r in conn.execute(pending.distinct().limit(limit), params).all()]
        return list(dict.fromkeys([*first, *rest]))[:limit]

    # ------------------------------------------------------------------ turns and stops

    def start_turn(self, chat_id: int, replica_id: str, turn: int, owner: int) -> None:
        """Publish the turn this process runs in a chat (for a /stop that reaches another process)."""
        with self._engine.begin() as conn:
            publish_turn(conn, TurnMark(chat_id, replica_id, turn, owner))

    def end_turn(self, chat_id: int, replica_id: str, turn: int | None = None) -> None:
        """The chat's turn ended (`turn`: only that one)."""
        with self._engine.begin() as conn:
            if turn is not None:
                clear_turn(conn, TurnMark(chat_id, replica_id, turn, 0))
                return
            conn.execute(
                update(_CHATS)
                .where(_CHATS.c.chat_id == chat_id, _CHATS.c.holder == replica_id)
                .values(turn=None, turn_owner=None, stop=None)
            )

    def running(self, chat_id: int) -> RunningTurn | None:
        """The turn a live process runs in a chat, if any."""
        with self._engine.connect() as conn:
            row = conn.execute(self._running, self._params(cid=chat_id)).first()
        return None if row is None else RunningTurn(row.holder, int(row.turn), row.turn_owner)

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
            rows = conn.execute(_STOPS_FOR, {"me": replica_id}).all()
        return [(int(r.chat_id), int(r.stop)) for r in rows]
