"""The inbox: user messages stored the moment they arrive, until their chat's turn takes them.

A queued message lives here, not in `messages`, so nothing that reads the history (the model's context,
/retry's last message, edits) sees it before its own turn; the turn start moves it into `messages` in the
same transaction that deletes it here, so it is always in exactly one of the two tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, Table, bindparam, delete, func, insert, select, update

from db import connections
from db.conversation_statements import INSERT_MESSAGE_RUN, TOUCH_SESSION_REVISION_RUN
from db.models import InboxMessage, utcnow
from db.prepared import Prepared
from db.rows import columns_for
from db.speakers import Speaker, chat_type_of

_INBOX: Table = InboxMessage.__table__  # type: ignore[assignment]
# Built once with bind parameters: building a statement per call is most of a small query's cost.
_DELETE = delete(_INBOX).where(_INBOX.c.id == bindparam("iid"))
_DELETE_RUN = Prepared(_DELETE)
_LATEST_IN = select(func.max(_INBOX.c.id)).where(_INBOX.c.chat_id == bindparam("cid"))
_ANY_IN = select(_INBOX.c.id).where(_INBOX.c.chat_id == bindparam("cid")).limit(1)


@dataclass(slots=True)
class Entry:
    """A message as the inbox stores it: who said it where, what (`media`: what a voice note, photo or file
    brought, {"ids", "heard", "speak"}), the Telegram message and update it came in (a chat's queue is in
    update order), and for a /retry or an edit the stored user message to answer again (`rerun_of`) and the
    Telegram message the answer refers to (`reply_to`).

    Not changed once made (a re-run is a copy: `dataclasses.replace`); not declared frozen, like Queued: a
    frozen dataclass's constructor costs about twice as much, and the turn path reads every waiting one."""

    speaker: Speaker
    content: str
    tg_message_id: int | None = None
    media: dict[str, Any] | None = None
    update_id: int | None = None
    rerun_of: int | None = None
    reply_to: int | None = None


@dataclass(slots=True)
class Queued:
    """An entry waiting in the inbox, read back with its inbox id and arrival time (`queued`)."""

    id: int
    received_at: datetime
    entry: Entry

    # What the runtime asks of a waiting message before it takes it (bot/runtime/runner.py, the start-up's
    # access check).
    @property
    def user_id(self) -> int:
        return self.entry.speaker.user_id

    @property
    def chat_id(self) -> int:
        return self.entry.speaker.chat_id

    @property
    def chat_type(self) -> str:
        return chat_type_of(self.user_id, self.chat_id, self.entry.speaker.chat_type)

    @property
    def rerun_of(self) -> int | None:
        return self.entry.rerun_of


# The inbox's columns: the speaker's (db/speakers.py), then the entry's own (its fields after `speaker`).
_SPEAKER_KEYS = tuple(f.name for f in fields(Speaker))
_ENTRY_KEYS = tuple(f.name for f in fields(Entry) if f.name != "speaker")
assert fields(Entry)[0].name == "speaker"
_SPEAKER_COLUMNS = columns_for(_INBOX, Speaker)
_ENTRY_COLUMNS = tuple(_INBOX.c[name] for name in _ENTRY_KEYS)
_CUT = 2 + len(_SPEAKER_COLUMNS)
# id, received_at, the speaker's columns, the entry's: `queued(row)` builds a Queued by position from them
# (tests/db/test_row_order.py pins both).
_QUEUED = select(_INBOX.c.id, _INBOX.c.received_at, *_SPEAKER_COLUMNS, *_ENTRY_COLUMNS)
_WAITING_IN = _QUEUED.where(_INBOX.c.chat_id == bindparam("cid")).order_by(
    _INBOX.c.update_id.asc().nulls_first(), _INBOX.c.id
)
_WAITING_IN_RUN = Prepared(_WAITING_IN)


def queued(row: Sequence[Any]) -> Queued:
    """A row of `_QUEUED` as a record (by position: the turn path reads a chat's waiting messages)."""
    return Queued(row[0], row[1], Entry(Speaker(*row[2:_CUT]), *row[_CUT:]))


_INSERT_RUN = Prepared(
    insert(_INBOX).returning(_INBOX.c.id),
    keys=(*_SPEAKER_KEYS, *_ENTRY_KEYS, "received_at"),
)


def insert_entry(conn: Connection, entry: Entry) -> int:
    """Queue a message in the caller's transaction; returns its inbox id."""
    who = entry.speaker
    row = {name: getattr(who, name) for name in _SPEAKER_KEYS}
    row["chat_type"] = chat_type_of(who.user_id, who.chat_id, who.chat_type)  # unknown: as a session has it
    row.update((name, getattr(entry, name)) for name in _ENTRY_KEYS)
    row["received_at"] = utcnow()
    return int(_INSERT_RUN.scalar(conn, row))


def move_into_history(
    conn: Connection,
    session_id: str,
    user_id: int,
    chat_id: int,
    messages: Sequence[tuple[str, int | None]],
    inbox_ids: Sequence[int],
    status: str,
    revision: int | None = None,
) -> tuple[list[int], int]:
    """Store a turn's user messages ((text, Telegram id), in order) in the session's history and take them
    out of the inbox, in the caller's transaction; returns their message ids and the session's history
    revision after them (db/history_cache.py).

    `revision`: the caller's transaction has marked the session active already and read its revision
    then (holding its row: on SQLite the whole database, on PostgreSQL the row's lock, which another
    transaction's message trigger waits for); the revision after is that plus the rows inserted here
    (migration 0023 counts each)."""
    now = utcnow()
    ids = []
    for text, tg_message_id in messages:
        row = {
            "session_id": session_id,
            "user_id": user_id,
            "chat_id": chat_id,
            "role": "user",
            "content": text,
            "tool_calls": None,
            "tool_call_id": None,
            "tool_name": None,
            "status": status,
            "created_at": now,
            "tg_message_id": tg_message_id,
        }
        ids.append(int(INSERT_MESSAGE_RUN.scalar(conn, row)))
    discard_in(conn, inbox_ids)
    if revision is not None:
        return ids, revision + len(ids)
    revision = TOUCH_SESSION_REVISION_RUN.scalar(conn, {"sid": session_id, "at": now})
    return ids, int(revision)


def discard_in(conn: Connection, inbox_ids: Sequence[int]) -> None:
    """Take messages out of the inbox in the caller's transaction."""
    if inbox_ids:
        _DELETE_RUN.run_many(conn, [{"iid": i} for i in inbox_ids])


class Inbox:
    """Messages that arrived and wait for their chat's turn."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def put(self, entry: Entry) -> int:
        """Store a message that just arrived; returns its inbox id."""
        with self._engine.begin() as conn:
            return insert_entry(conn, entry)

    def edit(self, inbox_id: int, content: str) -> None:
        """The user edited a message still waiting: its turn will use the new text."""
        with self._engine.begin() as conn:
            conn.execute(update(_INBOX).where(_INBOX.c.id == inbox_id).values(content=content))

    def edit_waiting(self, chat_id: int, user_id: int, tg_message_id: int, content: str) -> bool:
        """The user edited a message that still waits (in whichever process): its turn uses the new text.
        True when one was waiting."""
        with self._engine.begin() as conn:
            done = conn.execute(
                update(_INBOX)
                .where(
                    _INBOX.c.chat_id == chat_id,
                    _INBOX.c.user_id == user_id,
                    _INBOX.c.tg_message_id == tg_message_id,
                    _INBOX.c.rerun_of.is_(None),
                )
                .values(content=content)
            ).rowcount
        return bool(done)

    def discard(self, inbox_ids: Sequence[int]) -> None:
        """Forget waiting messages that will not be answered."""
        if inbox_ids:
            with self._engine.begin() as conn:
                discard_in(conn, inbox_ids)

    def waiting(self) -> list[Queued]:
        """Every waiting message, in arrival order (at start-up: what a stopped process left)."""
        with self._engine.connect() as conn:
            rows = conn.execute(_QUEUED.order_by(_INBOX.c.id)).all()
        return [queued(row) for row in rows]

    def waiting_in(self, chat_id: int) -> list[Queued]:
        """A chat's waiting messages in the order Telegram gave them (update id, then arrival)."""
        with connections.read(self._engine) as conn:
            rows = _WAITING_IN_RUN.rows(conn, {"cid": chat_id})
        return [queued(row) for row in rows]

    def latest_in(self, chat_id: int) -> int:
        """The newest inbox id of a chat (0 when none waits): the debounce watches it grow."""
        with self._engine.connect() as conn:
            found = conn.execute(_LATEST_IN, {"cid": chat_id}).scalar()
        return int(found or 0)

    def has_waiting(self, chat_id: int) -> bool:
        """Whether any message of the chat waits."""
        with self._engine.connect() as conn:
            return conn.execute(_ANY_IN, {"cid": chat_id}).first() is not None

    def store_turn(
        self,
        session_id: str,
        user_id: int,
        chat_id: int,
        messages: Sequence[tuple[str, int | None]],
        inbox_ids: Sequence[int] = (),
        status: str = "pending",
    ) -> list[int]:
        """Store a turn's user messages ((text, Telegram id), in order) in the session's history and take
        them out of the inbox, in one transaction; returns their message ids."""
        with self._engine.begin() as conn:
            ids, _revision = move_into_history(
                conn, session_id, user_id, chat_id, messages, inbox_ids, status
            )
            return ids
