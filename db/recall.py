"""The one seam between memory recall and the database: what differs between SQLite and PostgreSQL.

Recall is the same on both databases: db.memory_search takes keyword candidates and vector candidates,
re-scores them by exact cosine under the visibility filter and fuses the two rankings (that code is shared).
What a backend supplies is how words and vectors are indexed and searched:

- SQLite (db.recall_sqlite): FTS5 `memories_fts` with owner-prefixed words, sqlite-vec bit vectors in
  `memories_vec` (migrations 0002-0005);
- PostgreSQL (db.recall_postgres): a generated `tsvector` column with a GIN index on (user_id, words), and a
  pgvector `vector` column searched exactly within the user's rows.

`recall_backend(s)` picks the backend from the session's dialect; nothing else in db/ asks which database
it runs on.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any, Protocol

from sqlalchemy import ColumnElement
from sqlalchemy.orm import Session

from db.models import Memory

# Words of a query that either backend searches for.
MAX_QUERY_TERMS = 24


class RecallBackend(Protocol):
    """How one database indexes and searches memories' words and vectors."""

    name: str

    def index_words(
        self, s: Session, memory_id: int, user_id: int, content: str, context: str | None = None
    ) -> None:
        """Write (or rewrite) the row's words in the keyword index."""

    def put_vector(self, s: Session, memory: Memory, vector: Sequence[float]) -> None:
        """Store the row's vector (memory.embedding and any index of it)."""

    def drop_vectors(self, s: Session, ids: Sequence[int]) -> None:
        """Remove the vectors of these rows from any index kept beside `memories`."""

    def recenter(self, s: Session) -> bool:
        """Set the quantization center from the stored vectors and re-quantize them; False if none."""

    def vec_dim(self, s: Session) -> int | None:
        """The embedding dimension the vector index is built for, or None when it has none."""

    def rebuild_vec_table(self, s: Session, dim: int) -> None:
        """Rebuild the vector index for a new dimension; every row loses its vector."""

    def keyword_ids(self, s: Session, user_id: int, query_text: str, k: int) -> list[int]:
        """Up to k rowids of the user's memories matching the query's words, best first."""

    def vector_candidates(
        self, s: Session, user_id: int, vector: Sequence[float], k: int, layer: str | None = None
    ) -> list[int]:
        """Rowids of the user's rows nearest to `vector` (about OVERSAMPLE * k), to be re-scored exactly."""

    def distance(self, embedding: Any, query: ColumnElement[Any]) -> ColumnElement[Any]:
        """The exact cosine distance between a stored vector and the bound query vector."""

    def query_vector(self, vector: Sequence[float] | None) -> Any:
        """The value bound as the query vector (`qv`), also when there is none."""


_IMPLEMENTATIONS = {"sqlite": "db.recall_sqlite", "postgresql": "db.recall_postgres"}
_BACKENDS: dict[str, RecallBackend] = {}


def backend_for_dialect(name: str) -> RecallBackend:
    """The backend of a dialect name ("sqlite" or "postgresql")."""
    found = _BACKENDS.get(name)
    if found is None:
        if name not in _IMPLEMENTATIONS:
            raise ValueError(f"memory recall supports SQLite and PostgreSQL, not {name}")
        # Imported on first use: SQLite users never load psycopg or pgvector, and the implementations can
        # import db.memories, which calls back into this module.
        found = importlib.import_module(_IMPLEMENTATIONS[name]).BACKEND
        _BACKENDS[name] = found
    return found


def recall_backend(s: Session) -> RecallBackend:
    """The backend for the database this session talks to."""
    return backend_for_dialect(s.get_bind().dialect.name)


def content_terms(words: Sequence[str], stopwords: frozenset[str]) -> list[str]:
    """The query's distinct content words, in order (at most MAX_QUERY_TERMS); both backends search these."""
    terms: list[str] = []
    for w in words:
        if w in stopwords or w in terms or (len(w) < 2 and not w.isdigit()):
            continue
        terms.append(w)
        if len(terms) >= MAX_QUERY_TERMS:
            break
    return terms
