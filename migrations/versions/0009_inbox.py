"""inbox: user messages stored the moment they arrive, until their chat's turn starts

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23 14:45:00.000000

A message that arrives while its chat's turn runs, or during the debounce before a turn, waits in `inbox`
instead of only in memory: a restart in that window no longer loses it (the next start answers it). The
turn start moves its rows into `messages` as pending in one transaction, so history queries never see a
queued message and it gets an id after the previous turn's rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "inbox",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("chat_type", sa.String(length=16), nullable=False),
        sa.Column("first_name", sa.String(length=255), nullable=True),
        sa.Column("username", sa.String(length=255), nullable=True),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("tg_message_id", sa.BigInteger(), nullable=True),
        sa.Column("received_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )


def downgrade() -> None:
    op.drop_table("inbox")
