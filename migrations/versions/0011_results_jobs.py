"""stored tool results and durable code jobs

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23 15:00:00.000000

- tool_results: a tool result longer than one page, read by the model with `read_result` (handle, offset);
  owned by a user, deleted when its session ends.
- code_jobs: background `generate` jobs; their state survives a restart (those a previous process left
  running, known by `runner` = host:pid, are reported as interrupted at the next start).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "tool_results",
        sa.Column("id", sa.String(length=40), nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("session_id", sa.String(length=36), nullable=False),
        sa.Column("tool", sa.String(length=128), nullable=False),
        sa.Column("call_id", sa.String(length=128), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("chars", sa.Integer(), nullable=False),
        sa.Column("untrusted", sa.Boolean(), nullable=False, server_default=sa.false()),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_tool_results_session", "tool_results", ["session_id"])
    op.create_table(
        "code_jobs",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("session_id", sa.String(length=36), nullable=True),
        sa.Column("task", sa.Text(), nullable=False),
        sa.Column("language", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("runner", sa.String(length=128), nullable=False),
        sa.Column("result", sa.JSON(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("finished_at", sa.DateTime(), nullable=True),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_code_jobs_user_status", "code_jobs", ["user_id", "status"])


def downgrade() -> None:
    op.drop_index("ix_code_jobs_user_status", table_name="code_jobs")
    op.drop_table("code_jobs")
    op.drop_index("ix_tool_results_session", table_name="tool_results")
    op.drop_table("tool_results")
