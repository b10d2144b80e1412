"""memory context: the conversation a memory came from, in its keyword words

Revision ID: 0027
Revises: 0026
Create Date: 2026-12-02 22:30:00.000000

- memories.context (text, NULL): the conversation a memory came from (the turn it answers, the reply it
  got), which core_tools/memory/passage.py puts into what the row's vector is made from and its keyword words.
- PostgreSQL: the generated `content_tsv` (migration 0002) becomes the words of the content and the context,
  with its GIN index made again. SQLite's FTS5 words are written by the application (db/memory_words.py);
  existing rows have no context, so their words stay right.

Existing rows' vectors were made from the text alone: their `embedder` value has no passage format, so the
start-up re-embedding makes them again (recall uses the old ones meanwhile: the same embedder's space).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0027"
down_revision: str | None = "0026"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _tsv(expression: str) -> tuple[str, ...]:
    return (
        "DROP INDEX IF EXISTS ix_memories_words",
        "ALTER TABLE memories DROP COLUMN content_tsv",
        "ALTER TABLE memories ADD COLUMN content_tsv tsvector "
        f"GENERATED ALWAYS AS (to_tsvector('english'::regconfig, {expression})) STORED",
        "CREATE INDEX ix_memories_words ON memories USING gin (user_id, content_tsv)",
    )


def upgrade() -> None:
    op.add_column("memories", sa.Column("context", sa.Text(), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        for statement in _tsv("content || ' ' || coalesce(context, '')"):
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in _tsv("content"):
            op.execute(statement)
    op.drop_column("memories", "context")  # SQLite 3.35+ drops a column in place (triggers kept)
