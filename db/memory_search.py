"""Searching a user's memories: BM25 over `memories_fts`, bit-vector KNN over `memories_vec`, and both fused.

Vector search is two-stage (migration 0004): `memories_vec` holds a binary-quantized copy of each vector
(one bit a dimension, hamming distance) partitioned by user and by `shard` = id % SHARDS; the full float32
vector is `memories.embedding`. A search takes the nearest bit vectors of each of the user's shards, then
re-scores those rows by exact cosine. sqlite-vec is brute force and its top-k selection costs about
O(rows x k), so SHARDS small top-k searches are cheaper than one large one: at 100k rows of a user, 200
candidates cost 31 ms in one partition and 7.6 ms in 8 (bench/bench_memory.py).

Writing rows, words and vectors is db.memories. Every function here is synchronous and takes a Session.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import ColumnElement, Select, and_, bindparam, case, func, or_, select
from sqlalchemy.orm import Session

from db.memories import (
    MEMORIES,
    ROW_COLUMNS,
    SHARDS,
    STOPWORDS,
    MemoryRow,
    active_filter,
    f32,
    fts_words,
    get_center,
    normalise,
    owner_prefix,
    quantized_bits,
)
from db.models import Memory

# Bit candidates re-scored per wanted result (binary quantization loses order, exact cosine restores it),
# and the least taken from each shard.
OVERSAMPLE = 4
MIN_PER_SHARD = 8

MAX_QUERY_TERMS = 24
# A query word found in this many of the user's memories is dropped when a rarer word is there (keyword_ids).
COMMON_TERM_DOCS = 1000


@dataclass(frozen=True)
class Hit:
    """One recall result: the row, its fused relevance (0..1) and the raw signals behind it."""

    memory: MemoryRow
    relevance: float
    similarity: float | None = None  # cosine similarity to the query vector, when the vector search found it
    keyword_rank: int | None = None
    vector_rank: int | None = None


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
        docs = dict(_driver(s).execute(_term_docs_sql(len(terms)), params).fetchall())
        terms = [t for i, t in enumerate(terms) if docs[i] < COMMON_TERM_DOCS] or terms
    rows = _driver(s).execute(
        "SELECT rowid FROM memories_fts WHERE memories_fts MATCH :q ORDER BY rank LIMIT :k",
        {"q": " OR ".join(terms), "k": k},
    )
    return [r[0] for r in rows.fetchall()]


def _knn_sql(layer: bool) -> str:
    # One statement: a small KNN in each of the user's shards (the user and shard filters are inside the
    # KNN, so other users' chunks are never read).
    where = "embedding MATCH vec_bit(:q) AND k = :k AND user_id = :u AND shard = {sh}"
    if layer:
        where += " AND layer = :l"
    return " UNION ALL ".join(
        f"SELECT * FROM (SELECT memory_id FROM memories_vec WHERE {where.format(sh=sh)})"  # noqa: S608
        for sh in range(SHARDS)
    )


_KNN_SQL = {False: _knn_sql(False), True: _knn_sql(True)}


def query_bits(s: Session, vector: Sequence[float]) -> bytes:
    """The query vector as the bit vector the stored ones are compared with."""
    return quantized_bits(vector, get_center(s))


def _driver(s: Session) -> Any:
    # The sqlite connection under the session's: the two hottest reads of a recall (the FTS5 and the vec0
    # statements, plain SQL with no types to convert) skip SQLAlchemy's per-statement and per-row work.
    return s.connection().connection.driver_connection


def bit_candidates(
    s: Session, user_id: int, vector: Sequence[float] | bytes, k: int, layer: str | None = None
) -> list[int]:
    """Rowids of the user's vectors nearest to `vector` (or its query_bits()) by hamming distance: about
    OVERSAMPLE * k of them."""
    bits = vector if isinstance(vector, bytes) else query_bits(s, vector)
    per_shard = max(MIN_PER_SHARD, -(-OVERSAMPLE * k // SHARDS))
    params: dict[str, object] = {"q": bits, "k": per_shard, "u": user_id}
    if layer is not None:
        params["l"] = layer
    return [r[0] for r in _driver(s).execute(_KNN_SQL[layer is not None], params).fetchall()]


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


def _scored_sql(layers: bool, session: bool) -> Select[Any]:
    m = MEMORIES.c
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


# Recall's two reads, built once (a per-call statement with a few hundred bound ids measured 3.9 ms against
# 1.3 ms prebuilt): the candidates' exact distances under the visibility filter, then the winners' rows.
_SCORED = {(lay, ses): _scored_sql(lay, ses) for lay in (False, True) for ses in (False, True)}
_ROWS_BY_ID = select(*ROW_COLUMNS).where(Memory.id.in_(bindparam("ids", expanding=True)))


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
    period: tuple[datetime, datetime] | None = None,
    date_weight: float = 0.0,
    outside_factor: float = 1.0,
) -> list[Hit]:
    """BM25 and KNN candidates fused by weighted reciprocal rank; only the user's current rows, best first.

    The vector ranking is exact cosine over the bit-vector candidates and the keyword candidates (one query
    applies the filter and re-scores), so filtered-out rows do not take ranks; only the winners' rows are
    read in full. With a `period` (UTC, from the query's date words) and `date_weight`, the rows dated in it
    are a third ranking (by cosine to the query, else most recent first), and the scores of rows outside it
    are multiplied by `outside_factor` (0: only the period's rows, when it has any).
    """
    use_vec = vector is not None and embedder_id is not None and vector_weight > 0
    # The bit stage costs O(rows x k): ask for what can reach the fused top `limit` (a vector rank past
    # 2 x limit needs the keyword ranking's help, which the keyword candidates' exact distances give).
    bit_k = min(candidates, max(20, 2 * limit))
    one_layer = layers[0] if layers and len(layers) == 1 else None
    bits = query_bits(s, vector) if use_vec and vector is not None else None
    # Oversample: superseded, expired and other-session rows are filtered after each search.
    kw_ids = keyword_ids(s, user_id, query_text, candidates) if keyword_weight > 0 else []
    cands = bit_candidates(s, user_id, bits, bit_k, one_layer) if bits is not None else []
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
    # Relevance 1.0 = ranked first by every retriever that ran.
    best = (
        (keyword_weight if kw_ids else 0.0)
        + (vector_weight if vec_found and use_vec else 0.0)
        + (date_weight if dated else 0.0)
    )
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
