"""The memory self-check's reads and writes (core_tools/memory/selfcheck.py): which of a user's rows lack
a usable vector or have stale words in the keyword index, the repair of the words, and the stored result.

What "stale words" means differs by database:
- SQLite keeps the words in FTS5 `memories_fts`, written beside the row (db/recall_sqlite.py index_words, the
  owner-prefixed text of db/memory_words.fts_text); a row whose FTS row is missing or holds other words than
  its content's and context's is stale, and is rewritten the way a store writes it. The vector has a second
  part there, the bit vector in `memories_vec` that the vector search reads: a row missing from it counts as
  without a vector.
- PostgreSQL's `content_tsv` is a column generated from the content and context (migrations 0002, 0027): it
  cannot go stale, so there is nothing to find; the bit column `embedding_bits` is set by 0004's trigger with
  the vector.

Every function is synchronous, takes a Session and leaves committing to the caller.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import or_, select, text
from sqlalchemy.orm import Session

from db.memories import active_filter
from db.memory_vectors import PASSAGE_COLUMNS, PassageSource, passage_sources
from db.memory_words import fts_text, index_words, said_text
from db.models import Memory, MemoryCheck
from db.recall import recall_backend


def users_with_memories(s: Session) -> list[int]:
    """Every user who has at least one memory row, in id order."""
    return [int(u) for u in s.execute(select(Memory.user_id).distinct().order_by(Memory.user_id)).scalars()]


def current_memories(s: Session, user_id: int, now: datetime) -> list[tuple[str, str]]:
    """(public id, content) of the user's current memories (what recall may return), oldest first."""
    rows = s.execute(
        select(Memory.public_id, Memory.content).where(active_filter(user_id, now)).order_by(Memory.id)
    ).all()
    return [(str(r.public_id), str(r.content)) for r in rows]


def rows_without_vector(s: Session, user_id: int, embedder_id: str) -> list[PassageSource]:
    """The user's rows with no vector, a vector of another embedder or passage format (`embedder_id` is the
    index id), or (SQLite) no bit vector in `memories_vec` for the vector search to find."""
    missing = or_(Memory.embedder.is_(None), Memory.embedder != embedder_id, Memory.embedding.is_(None))
    rows = {
        r.id: r
        for r in passage_sources(
            s.execute(select(*PASSAGE_COLUMNS).where(Memory.user_id == user_id, missing)).all()
        )
    }
    if recall_backend(s).name == "sqlite":
        unindexed = s.execute(
            select(*PASSAGE_COLUMNS).where(
                Memory.user_id == user_id,
                Memory.embedding.is_not(None),
                text(
                    "NOT EXISTS (SELECT 1 FROM memories_vec AS v "
                    "WHERE v.user_id = memories.user_id AND v.memory_id = memories.id)"
                ),
            )
        ).all()
        rows.update({r.id: r for r in passage_sources(unindexed)})
    return [rows[i] for i in sorted(rows)]


def stale_word_rows(s: Session, user_id: int) -> list[tuple[int, str, str | None, str | None]]:
    """(rowid, content, context, speaker) of the user's rows whose keyword-index words are missing or not
    their text's (with who said it) and context's (SQLite's FTS5; none on PostgreSQL, whose words are
    generated from them)."""
    if recall_backend(s).name != "sqlite":
        return []
    found = s.execute(
        text(
            "SELECT m.id, m.content, m.context, m.speaker, f.content, f.context FROM memories AS m "
            "LEFT JOIN memories_fts AS f ON f.rowid = m.id WHERE m.user_id = :u"
        ),
        {"u": user_id},
    ).all()
    return [
        (int(i), str(c), ctx, who)
        for i, c, ctx, who, words, context_words in found
        if words != fts_text(user_id, said_text(str(c), who))
        or context_words != (fts_text(user_id, ctx) if ctx else None)
    ]


def rewrite_words(s: Session, user_id: int, rows: Sequence[tuple[int, str, str | None, str | None]]) -> None:
    """Write these rows' words in the keyword index again, as a store writes them."""
    for memory_id, content, context, speaker in rows:
        index_words(s, memory_id, user_id, content, context, speaker)


@dataclass(frozen=True)
class StoredCheck:
    """A user's last check as stored."""

    user_id: int
    checked_at: datetime
    memories: int
    findable: int
    repaired_vectors: int
    repaired_words: int
    seconds: float
    told_below: bool

    @property
    def percent(self) -> float:
        """Findable memories in percent (100 when there were none to find)."""
        return 100.0 * self.findable / self.memories if self.memories else 100.0


def _stored(row: MemoryCheck) -> StoredCheck:
    return StoredCheck(
        row.user_id,
        row.checked_at,
        row.memories,
        row.findable,
        row.repaired_vectors,
        row.repaired_words,
        row.seconds,
        row.told_below,
    )


def save_check(
    s: Session,
    user_id: int,
    *,
    checked_at: datetime,
    memories: int,
    findable: int,
    repaired_vectors: int,
    repaired_words: int,
    seconds: float,
) -> StoredCheck:
    """Store the user's latest check (one row per user); whether the owner was told of a fall is kept."""
    row = s.get(MemoryCheck, user_id)
    if row is None:
        row = MemoryCheck(user_id=user_id, told_below=False)
        s.add(row)
    row.checked_at = checked_at
    row.memories = memories
    row.findable = findable
    row.repaired_vectors = repaired_vectors
    row.repaired_words = repaired_words
    row.seconds = seconds
    s.flush()
    return _stored(row)


def last_check(s: Session, user_id: int) -> StoredCheck | None:
    """The user's last check, or None before the first."""
    row = s.get(MemoryCheck, user_id)
    return None if row is None else _stored(row)


def all_checks(s: Session) -> list[StoredCheck]:
    """Every user's last check, in user order."""
    return [_stored(r) for r in s.execute(select(MemoryCheck).order_by(MemoryCheck.user_id)).scalars()]


def set_told_below(s: Session, user_id: int, told: bool) -> None:
    """Record whether the owner has been told of the user's current fall below the threshold."""
    row = s.get(MemoryCheck, user_id)
    if row is not None:
        row.told_below = told
