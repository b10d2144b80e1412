"""memories: table, FTS5 keyword index and sqlite-vec vector index

On PostgreSQL the keyword index is a generated tsvector column of `memories` with a GIN index on
(user_id, words) instead of the FTS5 table and its triggers (db/recall_postgres.py); the vector column
comes in 0004.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23 07:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Migrations do not import application code, so the DDL of the virtual tables is repeated in
# db/memory_vectors.py (which rebuilds memories_vec when the embedding dimension changes).
FTS_DDL = (
    "CREATE VIRTUAL TABLE memories_fts USING fts5("
    "content, owner, tokenize='porter unicode61 remove_diacritics 2')"
)
VEC_DDL = (
    "CREATE VIRTUAL TABLE memories_vec USING vec0("
    "memory_id integer primary key, user_id integer partition key, layer text, "
    "embedding float[384] distance_metric=cosine)"
)
# A standalone FTS5 table kept in sync by triggers: every write path (ORM, raw SQL, cascades) stays
# consistent in the same transaction. `owner` holds the token "u<user_id>" so MATCH filters by user.
TRIGGERS = (
    "CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN "
    "INSERT INTO memories_fts(rowid, content, owner) VALUES (new.id, new.content, 'u' || new.user_id); END",
    "CREATE TRIGGER memories_fts_ad AFTER DELETE ON memories BEGIN "
    "DELETE FROM memories_fts WHERE rowid = old.id; END",
    "CREATE TRIGGER memories_fts_au AFTER UPDATE OF content, user_id ON memories BEGIN "
    "UPDATE memories_fts SET content = new.content, owner = 'u' || new.user_id WHERE rowid = new.id; END",
)


# PostgreSQL: words stemmed like FTS5's porter tokenizer, generated from the content (no trigger, no write
# path); btree_gin lets one GIN index hold (user_id, word) so a word's postings are one user's rows.
PG_UPGRADE = (
    "CREATE EXTENSION IF NOT EXISTS btree_gin",
    "ALTER TABLE memories ADD COLUMN content_tsv tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english'::regconfig, content)) STORED",
    "CREATE INDEX ix_memories_words ON memories USING gin (user_id, content_tsv)",
)


def _sqlite_upgrade() -> None:
    op.execute(FTS_DDL)
    op.execute(VEC_DDL)
    for trigger in TRIGGERS:
        op.execute(trigger)


def _postgresql_upgrade() -> None:
    for statement in PG_UPGRADE:
        op.execute(statement)


def _sqlite_downgrade() -> None:
    for name in ("memories_fts_au", "memories_fts_ad", "memories_fts_ai"):
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.execute("DROP TABLE IF EXISTS memories_vec")
    op.execute("DROP TABLE IF EXISTS memories_fts")


def upgrade() -> None:
    op.create_table(
        "memories",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("public_id", sa.String(length=36), nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("layer", sa.String(length=16), nullable=False),
        sa.Column("category", sa.String(length=32), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("certainty", sa.Double(), nullable=True),
        sa.Column("session_id", sa.String(length=36), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=True),
        sa.Column("superseded_by", sa.String(length=36), nullable=True),
        sa.Column("embedder", sa.String(length=128), nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("public_id"),
    )
    with op.batch_alter_table("memories", schema=None) as batch_op:
        batch_op.create_index("ix_memories_expires", ["expires_at"], unique=False)
        batch_op.create_index("ix_memories_user_layer_time", ["user_id", "layer", "created_at"], unique=False)
        batch_op.create_index("ix_memories_user_session", ["user_id", "session_id"], unique=False)
    if op.get_bind().dialect.name == "postgresql":
        _postgresql_upgrade()
    else:
        _sqlite_upgrade()


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":
        _sqlite_downgrade()
    # PostgreSQL: the words column and its index go with the table.
    with op.batch_alter_table("memories", schema=None) as batch_op:
        batch_op.drop_index("ix_memories_user_session")
        batch_op.drop_index("ix_memories_user_layer_time")
        batch_op.drop_index("ix_memories_expires")
    op.drop_table("memories")
