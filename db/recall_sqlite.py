"""Recall on SQLite: BM25 over FTS5 `memories_fts`, bit-vector KNN over sqlite-vec `memories_vec`.

Vector search is two-stage (migration 0004): `memories_vec` holds a binary-quantized copy of each vector
(one bit a dimension, hamming distance) partitioned by user and by `shard` = id % SHARDS; the full float32
vector is `memories.embedding`. A search takes the nearest bit vectors of each of the user's shards, then
db.memory_search re-scores those rows by exact cosine. sqlite-vec is brute force and its top-k selection
costs about O(rows x k), so SHARDS small top-k searches are cheaper than one large one: at 100k rows of a
user, 200 candidates cost 31 ms in one partition and 7.6 ms in 8 (bench/bench_memory.py).

`memories_fts` holds owner-prefixed words (migration 0005, see db.memories.fts_text), written with the row.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, func, select, text, update
from sqlalchemy.orm import Session

from db.memory_vectors import (
    CENTER_DDL,
    CENTER_SAMPLE,
    SHARDS,
    VEC_DDL,
    VEC_TABLE,
    bit_width,
    f32,
    get_center,
    quantized,
    quantized_bits,
    recenter,
)
from db.memory_words import STOPWORDS, fts_text, fts_words, owner_prefix
from db.models import Memory
from db.recall import content_terms

# Bit candidates re-scored per wanted result (binary quantization loses order, exact cosine restores it),
# and the least taken from each shard.
OVERSAMPLE = 4
MIN_PER_SHARD = 8

# A query word found in this many of the user's memories is dropped when a rarer word is there (keyword_ids).
COMMON_TERM_DOCS = 1000


def fts_terms(user_id: int, text_: str) -> list[str]:
    """The query's content words as quoted, owner-prefixed FTS5 terms (at most MAX_QUERY_TERMS)."""
    terms = content_terms(fts_words(text_), STOPWORDS)
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


class SqliteRecall:
    """FTS5 words and sqlite-vec bit vectors beside `memories`."""

    name = "sqlite"

    def index_words(
        self, s: Session, memory_id: int, user_id: int, content: str, context: str | None = None
    ) -> None:
        """Write (or rewrite) the row's owner-prefixed words, its own and its context's (ranked at
        CONTEXT_WEIGHT: migration 0027); deleting the row removes them (trigger)."""
        s.execute(text("DELETE FROM memories_fts WHERE rowid = :id"), {"id": memory_id})
        s.execute(
            text("INSERT INTO memories_fts(rowid, content, context) VALUES (:id, :c, :x)"),
            {
                "id": memory_id,
                "c": fts_text(user_id, content),
                "x": fts_text(user_id, context) if context else None,
            },
        )

    def put_vector(self, s: Session, memory: Memory, vector: Sequence[float]) -> None:
        """Store the bit vector in memories_vec and the full one in memories.embedding."""
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
                "v": quantized(vector, center),
            },
        )
        memory.embedding = f32(vector)
        if center is None:
            s.flush()
            if s.execute(text("SELECT count(*) FROM memories_vec")).scalar_one() >= CENTER_SAMPLE:
                recenter(s)

    def drop_vectors(self, s: Session, ids: Sequence[int]) -> None:
        """Delete the rows' bit vectors (vec0 tables have no triggers)."""
        if ids:
            s.execute(text("DELETE FROM memories_vec WHERE memory_id = :id"), [{"id": i} for i in ids])

    def recenter(self, s: Session) -> bool:
        """db.memories.recenter: the mean of the first CENTER_SAMPLE vectors; memories_vec rebuilt."""
        return recenter(s)

    def vec_dim(self, s: Session) -> int | None:
        """The table only knows its bit width; a stored float vector tells the exact dimension when it is
        not a multiple of 8."""
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

    def rebuild_vec_table(self, s: Session, dim: int) -> None:
        """Drop and recreate memories_vec and its center for a new dimension."""
        s.execute(text("DROP TABLE IF EXISTS memories_vec"))
        s.execute(text("DROP TABLE IF EXISTS memories_vec_center"))
        s.execute(text(VEC_DDL.format(bits=bit_width(dim))))
        s.execute(text(CENTER_DDL.format(bits=bit_width(dim))))
        s.execute(update(Memory).values(embedder=None, embedding=None))

    def keyword_ids(self, s: Session, user_id: int, query_text: str, k: int) -> list[int]:
        """BM25 over the user's owner-prefixed words."""
        return keyword_ids(s, user_id, query_text, k)

    def vector_candidates(
        self, s: Session, user_id: int, vector: Sequence[float], k: int, layer: str | None = None
    ) -> list[int]:
        """The nearest bit vectors in each of the user's shards."""
        return bit_candidates(s, user_id, vector, k, layer)

    def distance(self, embedding: Any, query: ColumnElement[Any]) -> ColumnElement[Any]:
        """sqlite-vec's cosine distance over float32 BLOBs."""
        return func.vec_distance_cosine(embedding, query)

    def query_vector(self, vector: Sequence[float] | None) -> Any:
        """float32 bytes; an empty BLOB when there is no vector (no row's distance is then computed)."""
        return f32(vector) if vector is not None else b""


BACKEND = SqliteRecall()
