"""Layered-memory queries: rows in `memories`, words in FTS5 `memories_fts`, vectors in vec0 `memories_vec`.

`memories.id` (the integer rowid) keys both virtual tables; `memories.public_id` (a uuid) is the model's id.
`memories_fts` is kept in sync by triggers (migration 0002); `memories_vec` is written here, in the same
transaction as the row. Every function is synchronous, takes a Session and leaves committing to the caller
unless its name says otherwise.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlite_vec
from sqlalchemy import ColumnElement, and_, delete, func, or_, select, text, update
from sqlalchemy.orm import Session

from db.models import Memory, new_id

LAYERS = ("long", "mid", "short", "session")
VEC_TABLE = "memories_vec"
# Same DDL as migration 0002 (migrations do not import application code); used to rebuild the table when the
# embedding dimension changes.
VEC_DDL = (
    "CREATE VIRTUAL TABLE memories_vec USING vec0("
    "memory_id integer primary key, user_id integer partition key, layer text, "
    "embedding float[{dim}] distance_metric=cosine)"
)
# Frequent words that only add noise to an OR-ed BM25 query (questions are full of them).
_STOPWORDS = frozenset(
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
MAX_QUERY_TERMS = 24


@dataclass(frozen=True)
class Hit:
    """One recall result: the row, its fused relevance (0..1) and the raw signals behind it."""

    memory: Memory
    relevance: float
    similarity: float | None = None  # cosine similarity to the query vector, when the vector search found it
    keyword_rank: int | None = None
    vector_rank: int | None = None


def active_filter(
    user_id: int, now: datetime, layers: Sequence[str] | None = None, session_id: str | None = None
) -> ColumnElement[bool]:
    """What a user may see now: theirs, not superseded, not expired, in `layers`, this session's."""
    conds: list[ColumnElement[bool]] = [
        Memory.user_id == user_id,
        Memory.superseded_by.is_(None),
        or_(Memory.expires_at.is_(None), Memory.expires_at > now),
    ]
    if layers:
        conds.append(Memory.layer.in_(list(layers)))
    if session_id is not None:
        # Session memories belong to one session; other sessions' leftovers are invisible until cleared.
        conds.append(or_(Memory.layer != "session", Memory.session_id == session_id))
    return and_(*conds)


def vec_dim(s: Session) -> int | None:
    """The dimension of the vec0 table's embedding column, or None when the table is missing."""
    sql = s.execute(
        text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = :n"), {"n": VEC_TABLE}
    ).scalar()
    if not sql:
        return None
    m = re.search(r"float\[(\d+)\]", str(sql))
    return int(m.group(1)) if m else None


def rebuild_vec_table(s: Session, dim: int) -> None:
    """Drop and recreate memories_vec with a new dimension; every row loses its vector (embedder set NULL)."""
    s.execute(text("DROP TABLE IF EXISTS memories_vec"))
    s.execute(text(VEC_DDL.format(dim=int(dim))))
    s.execute(update(Memory).values(embedder=None))


def _put_vector(s: Session, memory: Memory, vector: Sequence[float]) -> None:
    s.execute(text("DELETE FROM memories_vec WHERE memory_id = :id"), {"id": memory.id})
    s.execute(
        text("INSERT INTO memories_vec(memory_id, user_id, layer, embedding) VALUES (:id, :u, :l, :v)"),
        {"id": memory.id, "u": memory.user_id, "l": memory.layer, "v": sqlite_vec.serialize_float32(vector)},
    )


def set_vector(s: Session, memory: Memory, vector: Sequence[float] | None, embedder_id: str | None) -> None:
    """Store (or remove, when `vector` is None) the row's vector and record which embedder made it."""
    if vector is None or embedder_id is None:
        s.execute(text("DELETE FROM memories_vec WHERE memory_id = :id"), {"id": memory.id})
        memory.embedder = None
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
    """Add a memory row (the FTS trigger indexes it) and its vector when given."""
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
    s.flush()  # assigns the integer rowid the vector is keyed by
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


def session_memories(
    s: Session, user_id: int, session_id: str, now: datetime, limit: int = 50
) -> list[Memory]:
    """The current session's memories, oldest first (the order they were noted in)."""
    return list(
        s.execute(
            select(Memory)
            .where(active_filter(user_id, now, ["session"]), Memory.session_id == session_id)
            .order_by(Memory.created_at, Memory.id)
            .limit(limit)
        ).scalars()
    )


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


def fts_query(user_id: int, text_: str) -> str | None:
    """An FTS5 MATCH expression: the user's token AND any of the query's content words; None if no words."""
    terms: list[str] = []
    for w in _WORD.findall(text_.lower()):
        if w in _STOPWORDS or w in terms or (len(w) < 2 and not w.isdigit()):
            continue
        terms.append(w)
        if len(terms) >= MAX_QUERY_TERMS:
            break
    if not terms:
        return None
    # Quoted terms: the model's text cannot inject FTS5 operators; the table's porter tokenizer stems them.
    ors = " OR ".join('"' + t.replace('"', "") + '"' for t in terms)
    return f'owner:"u{int(user_id)}" AND content:({ors})'


def keyword_ids(s: Session, user_id: int, query_text: str, k: int) -> list[int]:
    """Up to k rowids of the user's memories matching the query's words, best BM25 first."""
    q = fts_query(user_id, query_text)
    if q is None:
        return []
    rows = s.execute(
        text(
            "SELECT rowid FROM memories_fts WHERE memories_fts MATCH :q "
            "ORDER BY bm25(memories_fts, 1.0, 0.0) LIMIT :k"
        ),
        {"q": q, "k": k},
    ).all()
    return [int(r[0]) for r in rows]


def vector_ids(
    s: Session, user_id: int, vector: Sequence[float], k: int, layer: str | None = None
) -> list[tuple[int, float]]:
    """Up to k (rowid, cosine similarity) of the user's nearest vectors; the user filter is inside the KNN."""
    sql = "SELECT memory_id, distance FROM memories_vec WHERE embedding MATCH :v AND k = :k AND user_id = :u"
    params: dict[str, object] = {"v": sqlite_vec.serialize_float32(vector), "k": k, "u": user_id}
    if layer is not None:
        sql += " AND layer = :l"
        params["l"] = layer
    rows = s.execute(text(sql + " ORDER BY distance"), params).all()
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
    found = vector_ids(s, user_id, vector, k, layer)
    rows = _load_active(
        s, (i for i, _ in found), active_filter(user_id, now, [layer], session_id), embedder_id
    )
    return [(rows[i], sim) for i, sim in found if i in rows]


def same_text(
    s: Session, user_id: int, content: str, now: datetime, *, layer: str, session_id: str | None
) -> Memory | None:
    """A current memory in `layer` whose normalised text equals `content` (dedupe without an embedder)."""
    want = normalise(content)
    cond = active_filter(user_id, now, [layer], session_id)
    ids = keyword_ids(s, user_id, content, 20)
    for mem in _load_active(s, ids, cond).values():
        if normalise(mem.content) == want:
            return mem
    return None


def normalise(content: str) -> str:
    """Lowercase words joined by single spaces: punctuation and spacing do not make a new memory."""
    return " ".join(_WORD.findall(content.lower()))


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
) -> list[Hit]:
    """BM25 and KNN candidates fused by weighted reciprocal rank; only the user's current rows, best first."""
    cond = active_filter(user_id, now, layers, session_id)
    # Oversample: superseded, expired and other-session rows are filtered after each search.
    kw_ids = keyword_ids(s, user_id, query_text, candidates) if keyword_weight > 0 else []
    vec_found: list[tuple[int, float]] = []
    if vector is not None and embedder_id is not None and vector_weight > 0:
        one_layer = layers[0] if layers and len(layers) == 1 else None
        vec_found = vector_ids(s, user_id, vector, candidates, one_layer)
    kw_rows = _load_active(s, kw_ids, cond)
    vec_rows = _load_active(s, (i for i, _ in vec_found), cond, embedder_id)
    scores: dict[int, float] = {}
    kw_rank: dict[int, int] = {}
    vec_rank: dict[int, int] = {}
    sims: dict[int, float] = {}
    for rank, i in enumerate((i for i in kw_ids if i in kw_rows), start=1):
        kw_rank[i] = rank
        scores[i] = scores.get(i, 0.0) + keyword_weight / (rrf_k + rank)
    for rank, (i, sim) in enumerate(((i, sim) for i, sim in vec_found if i in vec_rows), start=1):
        vec_rank[i] = rank
        sims[i] = sim
        scores[i] = scores.get(i, 0.0) + vector_weight / (rrf_k + rank)
    rows = {**kw_rows, **vec_rows}
    # Relevance 1.0 = ranked first by every retriever that ran.
    best = (keyword_weight if kw_ids else 0.0) + (vector_weight if vec_found else 0.0)
    top = sorted(scores, key=lambda i: (-scores[i], -rows[i].id))[:limit]
    return [
        Hit(
            memory=rows[i],
            relevance=round(scores[i] * (rrf_k + 1) / best, 3) if best else 0.0,
            similarity=round(sims[i], 4) if i in sims else None,
            keyword_rank=kw_rank.get(i),
            vector_rank=vec_rank.get(i),
        )
        for i in top
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
