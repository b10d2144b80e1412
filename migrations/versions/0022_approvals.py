"""approvals: tool calls waiting for the user's yes or no, and the tools a chat always allows

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-26 14:00:00.000000

- approvals: one row per tool call that needs the user's approval (APPROVE_TOOLS, an MCP server's
  `confirm`). The turn that asked waits on its `status` ("pending" -> "approved" | "denied" | "timeout" |
  "cancelled"); whichever process receives the button press writes the decision, `decided_by` and
  `decided_at`, so the decision reaches the turn wherever it runs.
- approval_always: (chat, tool) pairs a user allowed with "Always in this chat": not asked again there.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
# Another helper may add a migration at the same time; the lead re-chains this one after it at merge.
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "approvals",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("tool", sa.String(length=200), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("decided_by", sa.BigInteger(), nullable=True),
        sa.Column("decided_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    op.create_table(
        "approval_always",
        sa.Column("chat_id", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("tool", sa.String(length=200), primary_key=True),
        sa.Column("allowed_by", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("approval_always")
    op.drop_table("approvals")
