"""Recall on PostgreSQL: full-text search over a generated `tsvector` column, pgvector over `embedding`.

Migrations 0002 and 0004 give `memories` its PostgreSQL-only parts: `content_tsv`, generated from the
content (`to_tsvector('english', content)`), indexed by GIN on (user_id, content_tsv) (btree_gin), so a
word's postings are looked up within one user; `embedding vector(dim)`; and `embedding_bits` (bit
varying), the signs of (embedding - center) set by a trigger, as SQLite's `memories_vec` holds them.

The vector search has SQLite's two stages: the user's nearest bit vectors by hamming distance, read by an
index-only scan of ix_memories_user_bits ((user_id, layer) INCLUDE (id, embedding_bits), where one user's
bit vectors lie together), then exact cosine over those candidates (shared, in db.memory_search). Measured
(bench/bench_pg.py, random vectors, 10 users): an exact scan of the user's full vectors costs 22 ms at 10k a
user from the table (their rows are scattered among every other user's) and 176 ms at 100k even from a
covering index; an HNSW index over all users, filtered to the user afterwards, found only 4 % (11 % with
iterative scans) of the user's true 10 nearest. The center is the mean of the first CENTER_SAMPLE vectors,
as on SQLite (e5-style vectors share one large direction: plain signs tell them apart badly).
Migration 0015 turns parallel scans of `memories` off: two workers for a 10 ms scan of 100k index entries
made it no faster on a busy server and tripled its CPU. HNSW with pgvector 0.8's iterative scans was
measured again (bench/bench_pg.py --hnsw): it still finds fewer of the user's true nearest than this exact
bit scan at the same cost, and it reads other users' vectors for every user's query.
Reading the user's bit vectors is itself 8 ms at 100k memories, so recall searches a copy of them kept in
the process (db.recall_cache, kept current by the per-user version of migration 0018): the same bits, the
same center and the same order (ties by id), 1.1 against 17 ms median at 100k (bench/bench_pg.py). This
scan is what runs without a copy (MEMORY_RECALL_CACHE_MB=0, a user too big for it, a transaction that has
written).

Keyword search ranks every row that matches any query word by ts_rank (read from the heap), so, as on
SQLite, a word in COMMON_TERM_DOCS or more of the user's memories is dropped when the query has a rarer one;
the counts are estimated from pg_stats (GIN cannot stop counting early).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Float, TextClause, text, update
from sqlalchemy.orm import Session

from db import recall_cache
from db.memory_vectors import CENTER_SAMPLE, f32
from db.memory_words import CONTEXT_WEIGHT, STOPWORDS, fts_words
from db.models import Memory
from db.recall import content_terms

# Bit candidates re-scored per wanted result (as on SQLite), and the least taken.
OVERSAMPLE = 4
MIN_CANDIDATES = 64
TS_CONFIG = "english"  # also in migration 0002
# Same DDL as migration 0004 (migrations do not import application code).
BITS_INDEX = "CREATE INDEX ix_memories_user_bits ON memories (user_id, layer) INCLUDE (id, embedding_bits)"

# A query word in this many of the user's memories is left out when the query has a rarer one (as on
# SQLite, db.recall_sqlite.COMMON_TERM_DOCS): ranking every row that matches a common word is what costs.
COMMON_TERM_DOCS = 1000
# GIN has no early stop, so the words' counts cannot be probed cheaply: they are estimated from the
# planner's statistics of `memories` (kept by ANALYZE/autovacuum), a lexeme's share of the rows
# (most_common_elems of content_tsv) times the user's estimated rows (most_common_vals of user_id, else an
# even share of the other rows). Without statistics every estimate is 0 and every word is kept.
_TERM_DOCS = text(
    "WITH terms AS MATERIALIZED ("
    " SELECT n, tsvector_to_array(to_tsvector(CAST(:cfg AS regconfig), t)) AS lexemes"
    " FROM unnest(CAST(:terms AS text[])) WITH ORDINALITY AS x(t, n)),"
    " words AS (SELECT e.lexeme, e.freq FROM pg_stats AS s,"
    " unnest(CAST(CAST(s.most_common_elems AS text) AS text[]), s.most_common_elem_freqs) AS e(lexeme, freq)"
    " WHERE s.schemaname = current_schema() AND s.tablename = 'memories' AND s.attname = 'content_tsv'),"
    " owner AS (SELECT coalesce("
    "(SELECT m.f FROM unnest(CAST(CAST(s.most_common_vals AS text) AS bigint[]), s.most_common_freqs)"
    " AS m(v, f) WHERE m.v = CAST(:u AS bigint)),"
    " (1 - coalesce((SELECT sum(f) FROM unnest(s.most_common_freqs) AS f), 0))"
    " / greatest(CASE WHEN s.n_distinct < 0 THEN -s.n_distinct * c.reltuples ELSE s.n_distinct END"
    " - coalesce(cardinality(s.most_common_freqs), 0), 1)) * greatest(c.reltuples, 0) AS n"
    " FROM pg_stats AS s, pg_class AS c WHERE s.schemaname = current_schema() AND s.tablename = 'memories'"
    " AND s.attname = 'user_id' AND c.oid = to_regclass('memories'))"
    " SELECT terms.n, coalesce(max(words.freq), 0), coalesce((SELECT n FROM owner), 0)"
    " FROM terms LEFT JOIN words ON words.lexeme = ANY(terms.lexemes) GROUP BY terms.n"
)
# The user id is cast to bigint: a smallint parameter (psycopg sends small ints so) is no key of btree_gin's
# (user_id, content_tsv) index, and PostgreSQL then read the word's postings of every user and ANDed them
# with a bitmap of all the user's rows (15-40 ms at 100k memories a user, bench/bench_pg.py). The query is
# a bound string, not computed in the statement, so that the planner sees it (and estimates its rows).
# ts_rank's weights of the classes D, C, B, A: a memory's own words are A, its context's B (migration 0027).
RANK_WEIGHTS = [0.1, 0.2, CONTEXT_WEIGHT, 1.0]
_KEYWORDS = text(
    "SELECT id FROM memories, to_tsquery(CAST(:cfg AS regconfig), :q) AS query "
    "WHERE user_id = CAST(:u AS bigint) AND content_tsv @@ query "
    "ORDER BY ts_rank(CAST(:w AS real[]), content_tsv, query) DESC, id DESC LIMIT :k"
)


@functools.cache
def _weighted(n: int) -> TextClause:
    """_KEYWORDS ranked by the sum of each word's ts_rank times its inverse document frequency (ts_rank has
    no idf of its own: a word in half the user's memories counted as much as a name in one)."""
    if n == 1:
        return _KEYWORDS
    rank = " + ".join(
        f"CAST(:i{i} AS real) * ts_rank(CAST(:w AS real[]), content_tsv, "
        f"to_tsquery(CAST(:cfg AS regconfig), :t{i}))"
        for i in range(n)
    )
    head = (
        "SELECT id FROM memories, to_tsquery(CAST(:cfg AS regconfig), :q) AS query "
        "WHERE user_id = CAST(:u AS bigint) AND content_tsv @@ query ORDER BY "
    )
    return text(head + f"({rank}) DESC, id DESC LIMIT :k")  # placeholders only: no value in the text


# The query's bits are computed once (an uncorrelated subquery) against the same center as the rows'; ties
# by id, as db.recall_cache orders them.
_NEAREST = {
    False: text(
        "SELECT id FROM memories WHERE user_id = CAST(:u AS bigint) AND embedding_bits IS NOT NULL "
        "ORDER BY embedding_bits <~> (SELECT binary_quantize(CAST(:q AS vector) - center) "
        "FROM memories_vec_center WHERE id = 1), id LIMIT :k"
    ),
    True: text(
        "SELECT id FROM memories WHERE user_id = CAST(:u AS bigint) AND layer = :l "
        "AND embedding_bits IS NOT NULL "
        "ORDER BY embedding_bits <~> (SELECT binary_quantize(CAST(:q AS vector) - center) "
        "FROM memories_vec_center WHERE id = 1), id LIMIT :k"
    ),
}
_DIM = text(
    "SELECT atttypmod FROM pg_attribute "
    "WHERE attrelid = to_regclass('memories') AND attname = 'embedding' AND NOT attisdropped"
)


def vector_literal(vector: Sequence[float]) -> str:
    """pgvector's text form of a vector."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


class PostgresRecall:
    """A tsvector column and a pgvector column on `memories` itself: nothing to write beside the row."""

    name = "postgresql"

    def index_words(
        self, s: Session, memory_id: int, user_id: int, content: str, context: str | None = None
    ) -> None:
        """Nothing to do: `content_tsv` is generated from the content and context by PostgreSQL."""

    def put_vector(self, s: Session, memory: Memory, vector: Sequence[float]) -> None:
        """The vector goes into memories.embedding; the trigger of 0004 quantizes it into embedding_bits."""
        memory.embedding = f32(vector)
        if s.execute(text("SELECT sample FROM memories_vec_center WHERE id = 1")).scalar() == 0:
            s.flush()
            if s.execute(text("SELECT count(embedding) FROM memories")).scalar_one() >= CENTER_SAMPLE:
                self.recenter(s)

    def recenter(self, s: Session) -> bool:
        """Set the center to the mean of the first CENTER_SAMPLE vectors and re-quantize every row."""
        sample = CENTER_SAMPLE
        found = s.execute(
            text(
                "UPDATE memories_vec_center SET sample = :n, center = (SELECT avg(embedding) FROM "
                "(SELECT embedding FROM memories WHERE embedding IS NOT NULL ORDER BY id LIMIT :n) AS first) "
                "WHERE id = 1 AND EXISTS (SELECT 1 FROM memories WHERE embedding IS NOT NULL)"
            ),
            {"n": sample},
        )
        if not getattr(found, "rowcount", 0):
            return False
        s.execute(
            text(
                "UPDATE memories SET embedding_bits = binary_quantize(embedding - "
                "(SELECT center FROM memories_vec_center WHERE id = 1)) WHERE embedding IS NOT NULL"
            )
        )
        return True

    def drop_vectors(self, s: Session, ids: Sequence[int]) -> None:
        """Nothing to do: the vector is a column of the row."""

    def vec_dim(self, s: Session) -> int | None:
        """The dimension of the `vector(dim)` column (None when it has none)."""
        mod = s.execute(_DIM).scalar()
        return int(mod) if mod is not None and int(mod) > 0 else None

    def rebuild_vec_table(self, s: Session, dim: int) -> None:
        """Clear every vector, retype the vector column for the new dimension, reset the center."""
        dim = int(dim)
        s.execute(text("DROP INDEX IF EXISTS ix_memories_user_bits"))
        s.execute(update(Memory).values(embedder=None, embedding=None))
        s.execute(text(f"ALTER TABLE memories ALTER COLUMN embedding TYPE vector({dim})"))
        s.execute(
            text(
                "UPDATE memories_vec_center SET sample = 0, center = array_fill(0, ARRAY[:d])::real[]::vector"
            ),
            {"d": dim},
        )
        s.execute(text(BITS_INDEX))

    def keyword_ids(self, s: Session, user_id: int, query_text: str, k: int) -> list[int]:
        """Any of the query's content words (stemmed by the same configuration), best ts_rank first.

        A word in about COMMON_TERM_DOCS or more of the user's memories is left out when the query has a
        rarer one.
        """
        # Words are runs of letters and digits, so no tsquery operator can be injected.
        terms = content_terms(fts_words(query_text), STOPWORDS)
        if not terms:
            return []
        params: dict[str, Any] = {"cfg": TS_CONFIG, "u": user_id, "k": k, "w": RANK_WEIGHTS}
        if len(terms) == 1:
            return [int(r[0]) for r in s.execute(_KEYWORDS, {**params, "q": terms[0]})]
        est = {
            int(n): (float(f), float(rows))
            for n, f, rows in s.execute(_TERM_DOCS, {**params, "terms": terms})
        }
        docs = {i: f * rows for i, (f, rows) in est.items()}
        kept = [i for i in range(1, len(terms) + 1) if docs[i] < COMMON_TERM_DOCS] or list(est)
        total = max(rows for _, rows in est.values())
        params["q"] = " | ".join(terms[i - 1] for i in kept)
        for n, i in enumerate(kept):
            params[f"t{n}"] = terms[i - 1]
            # BM25's inverse document frequency, from the estimates (all equal without statistics).
            params[f"i{n}"] = math.log(1 + (total - docs[i] + 0.5) / (docs[i] + 0.5))
        return [int(r[0]) for r in s.execute(_weighted(len(kept)), params)]

    def vector_candidates(
        self, s: Session, user_id: int, vector: Sequence[float], k: int, layer: str | None = None
    ) -> list[int]:
        """The user's nearest bit vectors by hamming distance (about OVERSAMPLE * k of them), ties by id:
        from the process's copy of them (db.recall_cache) when it has one, else searched here."""
        want = max(MIN_CANDIDATES, OVERSAMPLE * k)
        found = recall_cache.vector_candidates(s, user_id, vector, want, layer)
        if found is not None:
            return found
        params: dict[str, Any] = {"u": user_id, "q": vector_literal(vector), "k": want}
        if layer is not None:
            params["l"] = layer
        return [int(r[0]) for r in s.execute(_NEAREST[layer is not None], params)]

    def distance(self, embedding: Any, query: Any) -> Any:
        """pgvector's cosine distance operator."""
        return embedding.op("<=>", return_type=Float())(query)

    def query_vector(self, vector: Sequence[float] | None) -> Any:
        """float32 bytes (the column type turns them into a vector), NULL when there is none."""
        return f32(vector) if vector is not None else None


BACKEND = PostgresRecall()
