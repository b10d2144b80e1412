"""memory history, origins and extraction marks

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23 14:00:00.000000

- memories: `origin` (user | tool | model | extraction | summary), `untrusted` (stored in a turn that had read
  web or MCP content), `said_at` (when the user said it, for extracted memories) and `event_at` (when the
  event happened, when the text says).
- memory_history: every change of a memory (add, update, supersede, forget, undo) with the old and new
  text, why and by whom (judge | model | user | extraction), so that it can be listed and undone.
- memory_extractions: per session, the last message that background extraction has read.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Plain ALTER TABLE ADD COLUMN, not a batch: a batch copies `memories` into a new table, which would drop
    # the FTS delete trigger of 0002.
    op.add_column(
        "memories", sa.Column("origin", sa.String(length=16), nullable=False, server_default="model")
    )
    op.add_column("memories", sa.Column("untrusted", sa.Boolean(), nullable=False, server_default=sa.false()))
    op.add_column("memories", sa.Column("said_at", sa.DateTime(), nullable=True))
    op.add_column("memories", sa.Column("event_at", sa.DateTime(), nullable=True))
    op.create_table(
        "memory_history",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("memory_id", sa.String(length=36), nullable=False),
        sa.Column("action", sa.String(length=16), nullable=False),
        sa.Column("old_text", sa.Text(), nullable=True),
        sa.Column("new_text", sa.Text(), nullable=True),
        sa.Column("related_id", sa.String(length=36), nullable=True),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("actor", sa.String(length=16), nullable=False),
        sa.Column("snapshot", sa.JSON(), nullable=True),
        sa.Column("undone_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("memory_history", schema=None) as batch_op:
        batch_op.create_index("ix_memory_history_user", ["user_id", "id"], unique=False)
        batch_op.create_index("ix_memory_history_memory", ["memory_id"], unique=False)
    op.create_table(
        "memory_extractions",
        sa.Column("session_id", sa.String(length=36), nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("last_message_id", sa.Integer(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("session_id"),
    )


def downgrade() -> None:
    op.drop_table("memory_extractions")
    with op.batch_alter_table("memory_history", schema=None) as batch_op:
        batch_op.drop_index("ix_memory_history_memory")
        batch_op.drop_index("ix_memory_history_user")
    op.drop_table("memory_history")
    for column in ("event_at", "said_at", "untrusted", "origin"):  # SQLite 3.35+ drops a column in place
        op.execute(f"ALTER TABLE memories DROP COLUMN {column}")
