"""Searching a user's memories: keyword and vector candidates from the database's recall backend, fused.

The candidate searches differ by database (db.recall: FTS5 and sqlite-vec bit vectors on SQLite, in
db.recall_sqlite; tsvector and pgvector on PostgreSQL, in db.recall_postgres). Everything after them is
shared: the exact cosine re-scoring under the visibility filter and the weighted reciprocal-rank fusion.

Writing rows is db.memories (words: db.memory_words, vectors: db.memory_vectors). Every function here is
synchronous and takes a Session.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import ColumnElement, Select, and_, bindparam, case, func, or_, select
from sqlalchemy.orm import Session

from db.memories import (
    MEMORIES,
    ROW_COLUMNS,
    MemoryRow,
    active_filter,
)
from db.memory_words import normalise
from db.models import Embedding, Memory
from db.recall import MAX_QUERY_TERMS, RecallBackend, recall_backend
from db.recall_sqlite import (  # SQLite's candidate searches, re-exported for bench/bench_memory.py
    COMMON_TERM_DOCS,
    MIN_PER_SHARD,
    OVERSAMPLE,
    bit_candidates,
    fts_query,
    fts_terms,
    query_bits,
)

__all__ = [
    "COMMON_TERM_DOCS",
    "MAX_QUERY_TERMS",
    "MIN_PER_SHARD",
    "OVERSAMPLE",
    "Hit",
    "bit_candidates",
    "fts_query",
    "fts_terms",
    "hybrid_search",
    "keyword_ids",
    "nearest",
    "query_bits",
    "same_text",
    "vector_ids",
]


@dataclass(frozen=True)
class Hit:
    """One recall result: the row, its fused relevance (0..1) and the raw signals behind it."""

    memory: MemoryRow
    relevance: float
    similarity: float | None = None  # cosine similarity to the query vector, when the vector search found it
    keyword_rank: int | None = None
    vector_rank: int | None = None


def keyword_ids(s: Session, user_id: int, query_text: str, k: int) -> list[int]:
    """Up to k rowids of the user's memories matching the query's words, best first."""
    return recall_backend(s).keyword_ids(s, user_id, query_text, k)


def _qv(backend: RecallBackend, vector: Sequence[float] | None = None) -> ColumnElement[Any]:
    # Typed: on PostgreSQL the bytes become a pgvector value.
    if vector is None:
        return bindparam("qv", type_=Embedding())
    return bindparam("qv", backend.query_vector(vector), type_=Embedding())


def same_space(column: Any, embedder_id: str | None = None) -> ColumnElement[bool]:
    """Rows whose vector a query of `embedder_id` can be compared with: made by the same embedder, with any
    passage format (an `embedder` value is `model` or `model#format`: core_tools/memory/passage.py), so
    recall keeps the old vectors while reembed() makes them again. Without an id, bound at run time as
    `emb` (the model part) and `emb_fmt` (`model#`)."""
    if embedder_id is None:
        base: Any = bindparam("emb")
        prefix: Any = bindparam("emb_fmt")
        width: Any = bindparam("emb_len")
    else:
        base = embedder_id.split("#")[0]
        prefix, width = base + "#", len(base) + 1
    return or_(column == base, func.substr(column, 1, width) == prefix)


def space_params(embedder_id: str | None) -> dict[str, Any]:
    """The bound values of `same_space` for `embedder_id` (None: nothing matches)."""
    base = embedder_id.split("#")[0] if embedder_id is not None else None
    return {"emb": base, "emb_fmt": None if base is None else base + "#", "emb_len": len(base or "") + 1}


def _distance(
    backend: RecallBackend, vector: Sequence[float], embedder_id: str
) -> ColumnElement[float | None]:
    """Exact cosine distance to `vector` for rows whose vector `embedder_id` made, else NULL."""
    dist = backend.distance(Memory.embedding, _qv(backend, vector))
    # Vectors of an older embedder live in another space until reembed() replaces them.
    return case(
        (and_(same_space(Memory.embedder, embedder_id), Memory.embedding.is_not(None)), dist), else_=None
    )


def vector_ids(
    s: Session, user_id: int, vector: Sequence[float], k: int, layer: str | None = None
) -> list[tuple[int, float]]:
    """Up to k (rowid, cosine similarity) of the user's nearest vectors: candidates, re-scored exactly."""
    backend = recall_backend(s)
    cands = backend.vector_candidates(s, user_id, vector, k, layer)
    if not cands:
        return []
    dist = backend.distance(Memory.embedding, _qv(backend, vector))
    rows = s.execute(
        select(Memory.id, dist.label("dist"))
        .where(Memory.id.in_(cands), Memory.embedding.is_not(None))
        .order_by(dist)
        .limit(k)
    ).all()
    return [(int(r.id), 1.0 - float(r.dist)) for r in rows]


def _load_active(
    s: Session, ids: Iterable[int], cond: ColumnElement[bool], embedder_id: str | None = None
) -> dict[int, Memory]:
    id_list = list(ids)
    if not id_list:
        return {}
    stmt = select(Memory).where(Memory.id.in_(id_list), cond)
    if embedder_id is not None:
        # Vectors of an older embedder live in another space until reembed() replaces them.
        stmt = stmt.where(same_space(Memory.embedder, embedder_id))
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
    backend = recall_backend(s)
    cands = backend.vector_candidates(s, user_id, vector, k, layer)
    if not cands:
        return []
    dist = _distance(backend, vector, embedder_id).label("dist")
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
    return [(r.Memory, 1.0 - cast(float, r.dist)) for r in found]


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


def _scored_sql(layers: bool, session: bool, backend: RecallBackend) -> Select[Any]:
    m = MEMORIES.c
    dist = case(
        (
            and_(same_space(m.embedder), m.embedding.is_not(None)),
            backend.distance(m.embedding, _qv(backend)),
        ),
        else_=None,
    )
    # `user_id + 0`: see active_filter's note on by_id.
    stmt = select(m.id, dist, m.speaker).where(
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


def _when_column() -> ColumnElement[datetime]:
    """A memory's date for period questions: when it happened if the text said so, else when it was said
    (extraction records the message's time), else when it was stored."""
    m = MEMORIES.c
    return func.coalesce(m.event_at, m.said_at, m.created_at)


# The most recent rows of a named period taken as date candidates: bounds the read for a user with many
# memories in the period (their exact cosine then ranks them).
PERIOD_CANDIDATES = 300


def _period_sql(layers: bool, session: bool) -> Select[Any]:
    m = MEMORIES.c
    when = _when_column()
    stmt = select(m.id).where(
        m.user_id == bindparam("uid"),
        when >= bindparam("lo"),
        when < bindparam("hi"),
        m.superseded_by.is_(None),
        or_(m.expires_at.is_(None), m.expires_at > bindparam("now")),
    )
    if layers:
        stmt = stmt.where(m.layer.in_(bindparam("layers", expanding=True)))
    if session:
        stmt = stmt.where(or_(m.layer != "session", m.session_id == bindparam("sid")))
    return stmt.order_by(when.desc()).limit(bindparam("n"))


_PERIOD = {(lay, ses): _period_sql(lay, ses) for lay in (False, True) for ses in (False, True)}


def period_ids(
    s: Session,
    user_id: int,
    now: datetime,
    period: tuple[datetime, datetime],
    *,
    layers: Sequence[str] | None = None,
    session_id: str | None = None,
    n: int = PERIOD_CANDIDATES,
) -> list[int]:
    """Rowids of the user's current memories dated within [start, end) (UTC), most recent first."""
    lo, hi = (_utc(t) for t in period)
    params: dict[str, Any] = {"uid": user_id, "lo": lo, "hi": hi, "now": now, "n": n}
    if layers:
        params["layers"] = list(layers)
    if session_id is not None:
        params["sid"] = session_id
    return [int(r[0]) for r in s.execute(_PERIOD[(bool(layers), session_id is not None)], params)]


def _utc(t: datetime) -> datetime:
    # The columns hold UTC; a naive bound is taken as UTC.
    return t.astimezone(UTC) if t.tzinfo is not None else t.replace(tzinfo=UTC)


# Recall's two reads, built once per backend (a per-call statement with a few hundred bound ids measured
# 3.9 ms against 1.3 ms prebuilt): the candidates' exact distances under the visibility filter, then the
# winners' rows.
_SCORED: dict[tuple[str, bool, bool], Select[Any]] = {}


def _scored(backend: RecallBackend, layers: bool, session: bool) -> Select[Any]:
    key = (backend.name, layers, session)
    stmt = _SCORED.get(key)
    if stmt is None:
        stmt = _SCORED[key] = _scored_sql(layers, session, backend)
    return stmt


_ROWS_BY_ID = select(*ROW_COLUMNS).where(Memory.id.in_(bindparam("ids", expanding=True)))


def named_speakers(query_text: str, speakers: set[str]) -> set[str]:
    """Which of these speakers the query names, as whole words in any case ("Anna's" names Anna)."""
    low = query_text.lower()
    return {
        who for who in speakers if re.search(r"(?<!\w)" + re.escape(who.lower()) + r"(?!\w)", low) is not None
    }


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
    vector_candidates: int | None = None,
    period: tuple[datetime, datetime] | None = None,
    date_weight: float = 0.0,
    outside_factor: float = 1.0,
    speaker_factor: float = 1.0,
) -> list[Hit]:
    """BM25 and KNN candidates fused by weighted reciprocal rank; only the user's current rows, best first.

    The vector ranking is exact cosine over the bit-vector candidates and the keyword candidates (one query
    applies the filter and re-scores), so filtered-out rows do not take ranks; only the winners' rows are
    read in full. With a `period` (UTC, from the query's date words) and `date_weight`, the rows dated in it
    are a third ranking (by cosine to the query, else most recent first), and the scores of rows outside it
    are multiplied by `outside_factor` (0: only the period's rows, when it has any). The scores of rows said
    by someone the query names ("what did Anna say about the trip?") are multiplied by `speaker_factor`.
    """
    use_vec = vector is not None and embedder_id is not None and vector_weight > 0
    # The bit stage costs O(rows x k): ask for what can reach the fused top `limit` (a vector rank past
    # 2 x limit needs the keyword ranking's help, which the keyword candidates' exact distances give).
    # `vector_candidates` sets it instead.
    bit_k = vector_candidates if vector_candidates is not None else min(candidates, max(20, 2 * limit))
    one_layer = layers[0] if layers and len(layers) == 1 else None
    backend = recall_backend(s)
    # Oversample: superseded, expired and other-session rows are filtered after each search.
    kw_ids = backend.keyword_ids(s, user_id, query_text, candidates) if keyword_weight > 0 else []
    cands = (
        backend.vector_candidates(s, user_id, vector, bit_k, one_layer)
        if use_vec and vector is not None
        else []
    )
    in_period = (
        period_ids(s, user_id, now, period, layers=layers, session_id=session_id)
        if period is not None and date_weight > 0
        else []
    )
    ids = set(kw_ids).union(cands, in_period)
    if not ids:
        return []
    params: dict[str, Any] = {
        "ids": list(ids),
        "uid": user_id,
        "now": now,
        # No vector: a query vector no row's embedder matches, so every distance is NULL.
        **space_params(embedder_id if use_vec else None),
        "qv": backend.query_vector(vector if use_vec else None),
    }
    if layers:
        params["layers"] = list(layers)
    if session_id is not None:
        params["sid"] = session_id
    visible: set[int] = set()
    dists: dict[int, float] = {}
    speakers: dict[int, str] = {}
    for rid, dist, speaker in s.execute(_scored(backend, bool(layers), session_id is not None), params):
        visible.add(rid)
        if dist is not None:
            dists[rid] = float(dist)
        if speaker:
            speakers[rid] = speaker
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
        if use_vec:
            scores[i] = scores.get(i, 0.0) + vector_weight / (rrf_k + rank)
    # In the period: nearest to the query first (the list is most recent first, which breaks ties).
    recency = {i: n for n, i in enumerate(in_period)}
    dated = sorted((i for i in in_period if i in visible), key=lambda i: (dists.get(i, 2.0), recency[i]))
    for rank, i in enumerate(dated, start=1):
        scores[i] = scores.get(i, 0.0) + date_weight / (rrf_k + rank)
    if dated and outside_factor != 1.0:
        inside = set(dated)
        for i in scores:
            if i not in inside:
                scores[i] *= outside_factor
        if outside_factor <= 0:
            scores = {i: v for i, v in scores.items() if i in inside}
    boosted = False
    if speaker_factor != 1.0 and speakers:
        named = named_speakers(query_text, set(speakers.values()))
        for i, who in speakers.items():
            if who in named and i in scores:
                scores[i] *= speaker_factor
                boosted = True
    # Relevance 1.0 = ranked first by every retriever that ran.
    best = (
        (keyword_weight if kw_ids else 0.0)
        + (vector_weight if vec_found and use_vec else 0.0)
        + (date_weight if dated else 0.0)
    ) * (max(1.0, speaker_factor) if boosted else 1.0)
    top = sorted(scores, key=lambda i: (-scores[i], -i))[:limit]
    rows = {r.id: r for r in (MemoryRow(*r) for r in s.execute(_ROWS_BY_ID, {"ids": top}))} if top else {}
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
