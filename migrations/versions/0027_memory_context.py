"""memory context: the conversation a memory came from, in its keyword words

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-02 22:30:00.000000

- memories.context (text, NULL): the conversation a memory came from (the turn it answers, the reply it
  got), which core_tools/memory/passage.py puts into what the row's vector is made from and its keyword words.
- The keyword index gets a second part for the context, ranked below the memory's own words
  (db.memory_words.CONTEXT_WEIGHT): on SQLite `memories_fts` is made again with the columns (content,
  context), the existing words copied and bm25's column weights set as the table's default rank; on
  PostgreSQL the generated `content_tsv` (0002) becomes the content's words (weight A) and the context's
  (weight B), with its GIN index made again.

Existing rows have no context, so their words stay right. Their vectors were made from the text alone: their
`embedder` value has no passage format, so the start-up re-embedding makes them again (recall uses the old
ones meanwhile: the same embedder's space).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Migrations do not import application code: this is db.memory_words.CONTEXT_WEIGHT at this revision.
CONTEXT_WEIGHT = 0.4
TOKENIZE = "tokenize='porter unicode61 remove_diacritics 2'"


def _tsv(expression: str) -> tuple[str, ...]:
    return (
        "DROP INDEX IF EXISTS ix_memories_words",
        "ALTER TABLE memories DROP COLUMN content_tsv",
        f"ALTER TABLE memories ADD COLUMN content_tsv tsvector GENERATED ALWAYS AS ({expression}) STORED",
        "CREATE INDEX ix_memories_words ON memories USING gin (user_id, content_tsv)",
    )


def _sqlite_fts(columns: str, rank: str | None) -> None:
    # Through a plain table: renaming a virtual table under the delete trigger that names it is an error.
    op.execute("CREATE TEMP TABLE memories_fts_words AS SELECT rowid AS id, content FROM memories_fts")
    op.execute("DROP TABLE memories_fts")
    op.execute(f"CREATE VIRTUAL TABLE memories_fts USING fts5({columns}, {TOKENIZE})")
    op.execute("INSERT INTO memories_fts(rowid, content) SELECT id, content FROM memories_fts_words")
    op.execute("DROP TABLE memories_fts_words")
    if rank is not None:
        op.execute(
            sa.text("INSERT INTO memories_fts(memories_fts, rank) VALUES ('rank', :rank)").bindparams(
                rank=rank
            )
        )


def upgrade() -> None:
    op.add_column("memories", sa.Column("context", sa.Text(), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        for statement in _tsv(
            "setweight(to_tsvector('english'::regconfig, content), 'A') || "
            "setweight(to_tsvector('english'::regconfig, coalesce(context, '')), 'B')"
        ):
            op.execute(statement)
    else:
        _sqlite_fts("content, context", f"bm25(1.0, {CONTEXT_WEIGHT})")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in _tsv("to_tsvector('english'::regconfig, content)"):
            op.execute(statement)
    else:
        _sqlite_fts("content", None)
    op.drop_column("memories", "context")  # SQLite 3.35+ drops a column in place (triggers kept)
