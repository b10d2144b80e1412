"""turn info: one row per answered turn for its "why this answer" button (issue 23 section 5)

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-26 14:00:00.000000

- turn_info: keyed by the answer message it describes; the memories recalled into the turn's prompt, the
  tools it called (with their arguments), its model, LLM requests, tokens, cost and duration. Both of its
  message references cascade: the row goes when the answer or the turn's user message goes (a session's
  or a user's deletion cascades to their messages, and so to this).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0021"
down_revision: str | None = "0020"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "turn_info",
        sa.Column(
            "answer_id",
            sa.Integer(),
            sa.ForeignKey("messages.id", ondelete="CASCADE"),
            primary_key=True,
            autoincrement=False,
        ),
        sa.Column(
            "user_message_id", sa.Integer(), sa.ForeignKey("messages.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("model", sa.String(255), nullable=False),
        sa.Column("api_calls", sa.Integer(), nullable=False),
        sa.Column("tool_calls", sa.Integer(), nullable=False),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("cached_tokens", sa.Integer(), nullable=False),
        sa.Column("tokens_estimated", sa.Boolean(), nullable=False),
        sa.Column("cost_usd", sa.Double(), nullable=True),
        sa.Column("memories", sa.JSON(), nullable=False),
        sa.Column("tools", sa.JSON(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
    )
    # A deleted user message finds its turn's row by this (the cascade), not by a scan.
    op.create_index("ix_turn_info_user_message", "turn_info", ["user_message_id"])


def downgrade() -> None:
    op.drop_index("ix_turn_info_user_message", table_name="turn_info")
    op.drop_table("turn_info")
