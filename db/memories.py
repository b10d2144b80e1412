"""Layered-memory queries: rows in `memories`, words in FTS5 `memories_fts`, vectors in vec0 `memories_vec`.

`memories.id` (the integer rowid) keys both virtual tables; `memories.public_id` (a uuid) is the model's id.
A row's words (db.memory_words) and vector (db.memory_vectors) are written here, in the same transaction as
the row; a trigger removes the words with the row. Every function is synchronous, takes a Session and leaves
committing to the caller unless its name says otherwise.

Searching them is db.memory_search; this module writes and lists them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import (
    ColumnElement,
    Connection,
    Table,
    and_,
    bindparam,
    delete,
    func,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from db.memory_vectors import set_vector
from db.memory_words import index_words
from db.models import Memory, new_id
from db.prepared import Prepared
from db.recall import recall_backend
from db.rows import columns_for

LAYERS = ("long", "mid", "short", "session")
MEMORIES: Table = Memory.__table__  # type: ignore[assignment]


@dataclass(frozen=True)
class MemoryRow:
    """A memory's columns read by a Core select (recall reads many rows; ORM instances cost more)."""

    id: int
    public_id: str
    user_id: int
    layer: str
    category: str
    content: str
    certainty: float | None
    session_id: str | None
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    superseded_by: str | None
    embedder: str | None
    origin: str = "model"
    untrusted: bool = False
    said_at: datetime | None = None
    event_at: datetime | None = None
    context: str | None = None
    speaker: str | None = None


# MemoryRow's fields as the memories table's columns, in their order: MemoryRow(*row) (db/rows.py).
ROW_COLUMNS = columns_for(Memory.__table__, MemoryRow)


def active_filter(
    user_id: int,
    now: datetime,
    layers: Sequence[str] | None = None,
    session_id: str | None = None,
    *,
    by_id: bool = False,
) -> ColumnElement[bool]:
    """What a user may see now: theirs, not superseded, not expired, in `layers`, this session's.

    `by_id`: the query also has `id IN (candidates)`. SQLite without ANALYZE statistics guesses that
    `user_id = ?` is selective and walks the user's index (every row of a user with 100k memories: 20 ms)
    instead of looking up the few hundred candidates by rowid (2 ms); `user_id + 0` is not indexable.
    """
    conds: list[ColumnElement[bool]] = [
        (Memory.user_id + 0 if by_id else Memory.user_id) == user_id,
        Memory.superseded_by.is_(None),
        or_(Memory.expires_at.is_(None), Memory.expires_at > now),
    ]
    if layers:
        conds.append(Memory.layer.in_(list(layers)))
    if session_id is not None:
        # Session memories belong to one session; other sessions' leftovers are invisible until cleared.
        conds.append(or_(Memory.layer != "session", Memory.session_id == session_id))
    return and_(*conds)


@dataclass(frozen=True, kw_only=True)  # by name: layer, category and content are all strings
class NewMemory:
    """A memory row to insert, with its vector when there is one (`public_id`: restore a forgotten one)."""

    user_id: int
    layer: str
    category: str
    content: str
    now: datetime
    certainty: float | None = None
    session_id: str | None = None
    expires_at: datetime | None = None
    vector: Sequence[float] | None = None
    embedder_id: str | None = None
    origin: str = "model"
    untrusted: bool = False
    said_at: datetime | None = None
    event_at: datetime | None = None
    context: str | None = None
    speaker: str | None = None
    public_id: str | None = None


def insert_memory(s: Session, new: NewMemory) -> Memory:
    """Add a memory row, its words and its vector when given."""
    mem = Memory(
        public_id=new.public_id or new_id(),
        origin=new.origin,
        untrusted=new.untrusted,
        said_at=new.said_at,
        event_at=new.event_at,
        context=new.context,
        speaker=new.speaker,
        user_id=new.user_id,
        layer=new.layer,
        category=new.category,
        content=new.content,
        certainty=new.certainty,
        session_id=new.session_id,
        created_at=new.now,
        updated_at=new.now,
        expires_at=new.expires_at,
    )
    s.add(mem)
    s.flush()  # assigns the integer rowid the words and the vector are keyed by
    index_words(s, mem.id, new.user_id, new.content, new.context, new.speaker)
    set_vector(s, mem, new.vector, new.embedder_id)
    return mem


def update_memory(
    s: Session,
    mem: Memory,
    *,
    content: str,
    category: str,
    now: datetime,
    certainty: float | None,
    expires_at: datetime | None,
    vector: Sequence[float] | None,
    embedder_id: str | None,
) -> Memory:
    """Rewrite a memory in place (near-duplicate stored again): newest wording, refreshed TTL and vector."""
    mem.content = content
    mem.category = category
    mem.updated_at = now
    if certainty is not None:
        mem.certainty = certainty
    mem.expires_at = expires_at
    s.flush()
    index_words(s, mem.id, mem.user_id, content, mem.context, mem.speaker)
    set_vector(s, mem, vector, embedder_id)
    return mem


def get_memory(s: Session, user_id: int, public_id: str) -> Memory | None:
    """The user's memory with this public id, or None (another user's id looks unknown)."""
    return s.execute(
        select(Memory).where(Memory.public_id == public_id, Memory.user_id == user_id)
    ).scalar_one_or_none()


def carried(s: Session, user_id: int, public_id: str) -> tuple[datetime, str | None, str | None] | None:
    """When the user's memory was said (else stored), its context and who said it; None when there is no
    such row."""
    row = s.execute(
        select(
            func.coalesce(Memory.said_at, Memory.created_at).label("said_at"), Memory.context, Memory.speaker
        ).where(Memory.user_id == user_id, Memory.public_id == public_id)
    ).first()
    return None if row is None else (row.said_at, row.context, row.speaker)


def mark_superseded(s: Session, old: Memory, new_public_id: str) -> None:
    """Keep the old row but hide it from recall: it was replaced by `new_public_id`."""
    old.superseded_by = new_public_id


def superseded_by(s: Session, user_id: int, public_id: str) -> list[str]:
    """Public ids of the user's memories that `public_id` superseded."""
    return list(
        s.execute(
            select(Memory.public_id).where(Memory.user_id == user_id, Memory.superseded_by == public_id)
        ).scalars()
    )


def forget(s: Session, user_id: int, public_id: str) -> Memory | None:
    """Delete the user's memory (row, keywords, vector) and revive what it superseded; None when unknown."""
    mem = get_memory(s, user_id, public_id)
    if mem is None:
        return None
    # Forgetting a correction undoes it: the memories it superseded become current again.
    s.execute(
        update(Memory)
        .where(Memory.user_id == user_id, Memory.superseded_by == public_id)
        .values(superseded_by=None)
    )
    recall_backend(s).drop_vectors(s, [mem.id])
    s.delete(mem)
    s.flush()
    return mem


def _delete_rows(s: Session, ids: Sequence[int]) -> int:
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        recall_backend(s).drop_vectors(s, chunk)
        s.execute(delete(Memory).where(Memory.id.in_(chunk)))
    return len(ids)


def delete_expired(s: Session, now: datetime) -> int:
    """Delete every memory whose `expires_at` has passed (the daily job); returns how many."""
    ids = list(
        s.execute(select(Memory.id).where(Memory.expires_at.is_not(None), Memory.expires_at <= now)).scalars()
    )
    return _delete_rows(s, ids)


def clear_session_memories(s: Session, user_id: int, session_id: str) -> int:
    """Delete the session-layer memories of one session (it ended); returns how many."""
    ids = list(
        s.execute(
            select(Memory.id).where(
                Memory.user_id == user_id, Memory.layer == "session", Memory.session_id == session_id
            )
        ).scalars()
    )
    return _delete_rows(s, ids)


# Both run before every LLM call (the prompt's memory block): built once with bind parameters, which
# measured 0.15 ms a query against 0.5 ms for building the statement on each call.
_CURRENT = (
    Memory.user_id == bindparam("uid"),
    Memory.superseded_by.is_(None),
    or_(Memory.expires_at.is_(None), Memory.expires_at > bindparam("now")),
)
_SESSION_ROWS = (
    select(*ROW_COLUMNS)
    .where(*_CURRENT, Memory.layer == "session", Memory.session_id == bindparam("sid"))
    .order_by(Memory.created_at, Memory.id)
    .limit(bindparam("lim"))
)
_HAS_LONG_OR_MID = (
    select(Memory.id).where(*_CURRENT, or_(Memory.layer == "long", Memory.layer == "mid")).limit(1)
)

_HAS_LONG_OR_MID_RUN = Prepared(_HAS_LONG_OR_MID)
_SESSION_ROWS_RUN = Prepared(_SESSION_ROWS)


def prompt_memories(
    conn: Connection, user_id: int, session_id: str, now: datetime, limit: int = 50
) -> tuple[bool, list[MemoryRow]]:
    """What every turn's prompt needs: whether the user has any current long/mid memory (worth an
    embedding and a recall) and the current session's memories, oldest first.

    Two reads with fixed parameters on the driver's cursor (db/prepared.py), made on every turn: ORM
    entities and expanding IN lists cost more than the reads themselves (bench/bench_chat.py)."""
    params = {"uid": user_id, "now": now, "sid": session_id, "lim": limit}
    has_relevant = _HAS_LONG_OR_MID_RUN.first(conn, params) is not None
    return has_relevant, session_memories(conn, user_id, session_id, now, limit)


def session_memories(
    conn: Connection, user_id: int, session_id: str, now: datetime, limit: int = 50
) -> list[MemoryRow]:
    """The current session's memories, oldest first (the order they were noted in)."""
    params = {"uid": user_id, "now": now, "sid": session_id, "lim": limit}
    return [MemoryRow(*r) for r in _SESSION_ROWS_RUN.rows(conn, params)]


def list_memories(
    s: Session,
    user_id: int,
    now: datetime,
    *,
    layer: str | None = None,
    session_id: str | None = None,
    limit: int = 20,
    offset: int = 0,
) -> list[Memory]:
    """The user's current memories, most recent first, optionally of one layer (`offset`: a later page)."""
    return list(
        s.execute(
            select(Memory)
            .where(active_filter(user_id, now, [layer] if layer else None, session_id))
            .order_by(Memory.updated_at.desc(), Memory.id.desc())
            .limit(limit)
            .offset(offset)
        ).scalars()
    )


def count_by_layer(s: Session, user_id: int, now: datetime, session_id: str | None = None) -> dict[str, int]:
    """How many current memories the user has in each layer (the session layer: of `session_id`)."""
    rows = s.execute(
        select(Memory.layer, func.count())
        .where(active_filter(user_id, now, None, session_id))
        .group_by(Memory.layer)
    ).all()
    return {str(layer): int(n) for layer, n in rows}


def count_memories(s: Session, user_id: int | None = None) -> int:
    """How many rows (all users, or one), current or not."""
    stmt = select(func.count()).select_from(Memory)
    if user_id is not None:
        stmt = stmt.where(Memory.user_id == user_id)
    return int(s.execute(stmt).scalar_one())
