"""memory speaker: who said a memory, when not the user, in its words

Revision ID: 0032
Revises: 0031
Create Date: 2026-12-04 16:00:00.000000

- memories.speaker (varchar 64, NULL): who said it when someone other than the user did (a forwarded
  message's author, a person in a quoted conversation). Its words and vector are made from "speaker: text"
  (db.memory_words.said_text, core_tools/memory/passage.py), and a query naming the speaker ranks it higher
  (db.memory_search.hybrid_search).
- On PostgreSQL the generated `content_tsv` (0027) takes the speaker into the memory's own words (weight A),
  with its GIN index made again. On SQLite the words are written by the application, so nothing changes.

Existing rows have no speaker: their words and vectors stay right, nothing is re-indexed.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0032"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CONTEXT = "setweight(to_tsvector('english'::regconfig, coalesce(context, '')), 'B')"


def _tsv(own: str) -> tuple[str, ...]:
    return (
        "DROP INDEX IF EXISTS ix_memories_words",
        "ALTER TABLE memories DROP COLUMN content_tsv",
        "ALTER TABLE memories ADD COLUMN content_tsv tsvector GENERATED ALWAYS AS "
        f"(setweight(to_tsvector('english'::regconfig, {own}), 'A') || {CONTEXT}) STORED",
        "CREATE INDEX ix_memories_words ON memories USING gin (user_id, content_tsv)",
    )


def upgrade() -> None:
    op.add_column("memories", sa.Column("speaker", sa.String(64), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        for statement in _tsv("coalesce(speaker || ': ', '') || content"):
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in _tsv("content"):
            op.execute(statement)
    op.drop_column("memories", "speaker")  # SQLite 3.35+ drops a column in place (triggers kept)
