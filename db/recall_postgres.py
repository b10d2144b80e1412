"""Recall on PostgreSQL: full-text search over a generated `tsvector` column, pgvector over `embedding`.

Migrations 0002 and 0004 give `memories` two PostgreSQL-only parts: `content_tsv`, generated from the
content (`to_tsvector('english', content)`), indexed by GIN on (user_id, content_tsv) (btree_gin), so a
word's postings are looked up within one user; and `embedding vector(dim)`. The vector search is exact
within the user's rows, read by an index-only scan of the covering index ix_memories_user_vectors
((user_id, layer) INCLUDE (id, embedding)): one user's vectors lie together in it, where in the table they
are scattered among every other user's rows (bench/bench_pg.py, 10k memories a user among 10 users: 22 ms
from the table, 5 ms from the index). An HNSW index was measured and rejected: it searches all users' vectors
and filters afterwards, and found 4 % (11 % with iterative scans) of the user's true 10 nearest. A B-tree
entry holds at most about 2.7 kB, so above COVERING_MAX_DIM dimensions the index is not built and the search
reads the table (correct, slower). The rows found are re-scored and fused by db.memory_search, as on SQLite.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import Float, text, update
from sqlalchemy.orm import Session

from db.memories import STOPWORDS, f32, fts_words
from db.models import Memory
from db.recall import content_terms

# Rows taken per wanted result, as on SQLite: superseded, expired and other-session rows are filtered after.
OVERSAMPLE = 4
TS_CONFIG = "english"  # also in migration 0002
# Same DDL as migration 0004 (migrations do not import application code).
VECTOR_INDEX = "CREATE INDEX ix_memories_user_vectors ON memories (user_id, layer) INCLUDE (id, embedding)"
COVERING_MAX_DIM = 640  # 4 bytes a dimension plus headers within a B-tree entry's ~2700 bytes

_KEYWORDS = text(
    "SELECT id FROM memories, to_tsquery(CAST(:cfg AS regconfig), :q) AS query "
    "WHERE user_id = :u AND content_tsv @@ query "
    "ORDER BY ts_rank(content_tsv, query) DESC, id DESC LIMIT :k"
)
_NEAREST = {
    False: text(
        "SELECT id FROM memories WHERE user_id = :u AND embedding IS NOT NULL "
        "ORDER BY embedding <=> CAST(:q AS vector) LIMIT :k"
    ),
    True: text(
        "SELECT id FROM memories WHERE user_id = :u AND layer = :l AND embedding IS NOT NULL "
        "ORDER BY embedding <=> CAST(:q AS vector) LIMIT :k"
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

    def index_words(self, s: Session, memory_id: int, user_id: int, content: str) -> None:
        """Nothing to do: `content_tsv` is generated from the content by PostgreSQL."""

    def put_vector(self, s: Session, memory: Memory, vector: Sequence[float]) -> None:
        """The vector goes into memories.embedding (a pgvector column)."""
        memory.embedding = f32(vector)

    def drop_vectors(self, s: Session, ids: Sequence[int]) -> None:
        """Nothing to do: the vector is a column of the row."""

    def vec_dim(self, s: Session) -> int | None:
        """The dimension of the `vector(dim)` column (None when it has none)."""
        mod = s.execute(_DIM).scalar()
        return int(mod) if mod is not None and int(mod) > 0 else None

    def rebuild_vec_table(self, s: Session, dim: int) -> None:
        """Clear every vector, retype the column for the new dimension and rebuild the covering index."""
        s.execute(text("DROP INDEX IF EXISTS ix_memories_user_vectors"))
        s.execute(update(Memory).values(embedder=None, embedding=None))
        s.execute(text(f"ALTER TABLE memories ALTER COLUMN embedding TYPE vector({int(dim)})"))
        if dim <= COVERING_MAX_DIM:
            s.execute(text(VECTOR_INDEX))

    def keyword_ids(self, s: Session, user_id: int, query_text: str, k: int) -> list[int]:
        """Any of the query's content words (stemmed by the same configuration), best ts_rank first."""
        # Words are runs of letters and digits, so no tsquery operator can be injected.
        terms = content_terms(fts_words(query_text), STOPWORDS)
        if not terms:
            return []
        params = {"cfg": TS_CONFIG, "q": " | ".join(terms), "u": user_id, "k": k}
        return [int(r[0]) for r in s.execute(_KEYWORDS, params)]

    def vector_candidates(
        self, s: Session, user_id: int, vector: Sequence[float], k: int, layer: str | None = None
    ) -> list[int]:
        """The user's exact nearest rows by cosine distance."""
        params: dict[str, Any] = {"u": user_id, "q": vector_literal(vector), "k": OVERSAMPLE * k}
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
