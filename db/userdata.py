"""One user's rows across every table: read them all (an export) or delete them all (an erase).

The tables are found in the database itself, not listed by hand: every table with a `user_id` column (the
ones migrations made by raw SQL included), every table with a `chat_id` column for the user's private chat
(whose id is the user's), and the columns that name who changed something (`updated_by`, `set_by`,
`turn_owner`), which are cleared. A table added later is covered as long as it names its user `user_id`;
tests/backup/test_userdata.py checks every integer column of every table for the user's id afterwards.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from sqlalchemy import Connection, MetaData, Table, and_, delete, inspect, or_, select, update
from sqlalchemy.orm import Session

from db.models import Base, MediaFile, Memory
from db.recall import recall_backend
from db.snapshot import managed_tables
from db.transfer import RUNTIME_TABLES

USER_COLUMN = "user_id"
CHAT_COLUMN = "chat_id"
# Columns that name the user who did something to a row that is not theirs: cleared, the row kept.
REFERENCE_COLUMNS = ("updated_by", "set_by", "turn_owner", "decided_by")
# Columns that make a row the user's although it has no `user_id`: what they allowed ("Always in this chat").
OWNER_COLUMNS = ("allowed_by",)
SKIPPED_COLUMNS = frozenset({"embedding", "embedding_bits", "words"})  # index data, not the user's words


def _order(names: Sequence[str]) -> list[str]:
    """Children before parents (the models' foreign keys), then the tables the models do not declare."""
    known = [t.name for t in reversed(Base.metadata.sorted_tables) if t.name in names]
    return known + sorted(n for n in names if n not in known)


def _reflect(conn: Connection) -> dict[str, Table]:
    meta = MetaData()
    names = [n for n in managed_tables(conn) if n not in RUNTIME_TABLES]
    meta.reflect(conn, only=names)
    return {name: meta.tables[name] for name in names}


def _plain(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return {"base64": base64.b64encode(bytes(value)).decode()}
    return value


def _where(table: Table, user_id: int) -> Any:
    """The rows of `table` that are the user's: theirs by `user_id`, or in their private chat."""
    clauses = []
    if USER_COLUMN in table.c:
        clauses.append(table.c[USER_COLUMN] == user_id)
    if CHAT_COLUMN in table.c:
        clauses.append(table.c[CHAT_COLUMN] == user_id)
    clauses += [table.c[column] == user_id for column in OWNER_COLUMNS if column in table.c]
    if table.name == "users":
        clauses.append(table.c["id"] == user_id)
    return or_(*clauses) if clauses else None


def user_rows(conn: Connection, user_id: int) -> dict[str, list[dict[str, Any]]]:
    """Every row about the user, per table, as JSON-ready dicts (index data left out)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name, table in sorted(_reflect(conn).items()):
        where = _where(table, user_id)
        if where is None:
            continue
        columns = [c for c in table.c if c.name not in SKIPPED_COLUMNS]
        order = list(table.primary_key.columns) or columns[:1]
        rows = conn.execute(select(*columns).where(where).order_by(*order)).mappings()
        found = [_own({k: _plain(v) for k, v in row.items()}) for row in rows]
        if found:
            out[name] = found
    return out


def _own(row: dict[str, Any]) -> dict[str, Any]:
    """A row as the user's export shows it: a group conversation's summary is left out (it tells what the
    other members said; the user's own messages are in the export)."""
    if row.get("summary") is not None and row.get("chat_type") not in (None, "private"):
        row["summary"] = None
    return row


@dataclass
class Erased:
    """What an erase deleted: rows per table, the media hashes no other row uses, group sessions kept."""

    rows: dict[str, int] = field(default_factory=dict)
    media: list[str] = field(default_factory=list)
    sessions_handed_on: int = 0
    # Whether the database's files hold no copy of the deleted rows any more (db/scrub.py); False: another
    # connection held the WAL, the scrub is to be tried again.
    scrubbed: bool = True

    @property
    def total(self) -> int:
        """Rows deleted in all."""
        return sum(self.rows.values())


def erase_user(conn: Connection, user_id: int) -> Erased:
    """Delete every row of the user from every table (the caller commits); see the module."""
    erased = Erased()
    tables = _reflect(conn)
    hashes: set[str | None] = set(
        conn.execute(
            select(MediaFile.sha256).where(MediaFile.user_id == user_id, MediaFile.sha256.is_not(None))
        ).scalars()
    )
    _hand_on_group_sessions(conn, user_id, erased)
    # Memories first, through the recall backend (their words and vectors live beside them); on PostgreSQL
    # this bumps the user's vector version, whose row goes with the other user_id tables below.
    ids = list(conn.execute(select(Memory.id).where(Memory.user_id == user_id)).scalars())
    with Session(bind=conn) as s:
        backend = recall_backend(s)
        for start in range(0, len(ids), 500):
            backend.drop_vectors(s, ids[start : start + 500])
        s.flush()
    if ids:
        conn.execute(delete(Memory).where(Memory.id.in_(ids)))
        erased.rows["memories"] = len(ids)
    for name in _order(list(tables)):
        table = tables[name]
        where = _where(table, user_id)
        if name == "memories" or where is None:
            continue
        count = conn.execute(delete(table).where(where)).rowcount
        if count:
            erased.rows[name] = erased.rows.get(name, 0) + count
    for table in tables.values():
        for column in REFERENCE_COLUMNS:
            if column in table.c:
                conn.execute(update(table).where(table.c[column] == user_id).values({column: None}))
    if hashes:
        still = set(conn.execute(select(MediaFile.sha256).where(MediaFile.sha256.in_(hashes))).scalars())
        erased.media = sorted(h for h in hashes - still if h)  # a file another user sent too stays theirs
    return erased


def _hand_on_group_sessions(conn: Connection, user_id: int, erased: Erased) -> None:
    """A group's session is the group's, kept under the user who spoke first: hand it to another speaker
    (their rows stay), or let it go with the user when nobody else spoke there. The summary of every group
    session the user spoke in is dropped (it may tell what they said)."""
    sessions = Base.metadata.tables["sessions"]
    messages = Base.metadata.tables["messages"]
    spoke = select(messages.c.session_id).where(messages.c.user_id == user_id).distinct()
    conn.execute(
        update(sessions)
        .where(
            sessions.c.chat_type != "private",
            sessions.c.summary.is_not(None),
            or_(sessions.c.user_id == user_id, sessions.c.id.in_(spoke)),
        )
        .values(summary=None)
    )
    shared = conn.execute(
        select(sessions.c.id).where(and_(sessions.c.user_id == user_id, sessions.c.chat_type != "private"))
    ).scalars()
    for session_id in list(shared):
        other = conn.execute(
            select(messages.c.user_id)
            .where(messages.c.session_id == session_id, messages.c.user_id != user_id)
            .order_by(messages.c.id)
            .limit(1)
        ).scalar()
        if other is not None:
            conn.execute(update(sessions).where(sessions.c.id == session_id).values(user_id=other))
            erased.sessions_handed_on += 1


def has_user_columns(conn: Connection) -> list[str]:
    """The tables with a `user_id` column (for the doctor and the tests)."""
    return sorted(
        n for n in managed_tables(conn) if USER_COLUMN in {c["name"] for c in inspect(conn).get_columns(n)}
    )
