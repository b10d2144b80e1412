"""usage: budgets, owner notices of reached caps, turn events (loop protection and budget stops)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-23 08:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "budgets",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("period", sa.String(length=16), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("limit_value", sa.Double(), nullable=True),
        sa.Column("set_by", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("user_id", "period", "kind", name="uq_budgets_user_period_kind"),
    )
    op.create_table(
        "budget_notices",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("period", sa.String(length=16), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("window_start", sa.DateTime(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("user_id", "period", "kind", "window_start", name="uq_budget_notices_window"),
    )
    op.create_table(
        "turn_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=True),
        sa.Column("session_id", sa.String(length=36), nullable=True),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("turn_events", schema=None) as batch_op:
        batch_op.create_index("ix_turn_events_user_time", ["user_id", "created_at"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("turn_events", schema=None) as batch_op:
        batch_op.drop_index("ix_turn_events_user_time")
    op.drop_table("turn_events")
    op.drop_table("budget_notices")
    op.drop_table("budgets")
