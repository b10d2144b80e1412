"""schedules: reminders and scheduled tasks, and every firing of them

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23 14:10:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("chat_type", sa.String(length=16), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.Column("start_local", sa.String(length=32), nullable=False),
        sa.Column("timezone", sa.String(length=64), nullable=True),
        sa.Column("zone_used", sa.String(length=64), nullable=False),
        sa.Column("repeat", sa.Text(), nullable=True),
        sa.Column("repeat_kind", sa.String(length=8), nullable=True),
        sa.Column("until_at", sa.DateTime(), nullable=True),
        sa.Column("count", sa.Integer(), nullable=True),
        sa.Column("fired_count", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("pause_reason", sa.String(length=32), nullable=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("next_fire_at", sa.DateTime(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.create_index("ix_schedules_status_next", ["status", "next_fire_at"], unique=False)
        batch_op.create_index("ix_schedules_user_status", ["user_id", "status"], unique=False)
    op.create_table(
        "schedule_firings",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("schedule_id", sa.Integer(), nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("due_at", sa.DateTime(), nullable=False),
        sa.Column("not_before", sa.DateTime(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("missed", sa.Integer(), nullable=False),
        sa.Column("snoozed", sa.Boolean(), nullable=False),
        sa.Column("resend", sa.Boolean(), nullable=False),
        sa.Column("result_text", sa.Text(), nullable=True),
        sa.Column("message_id", sa.BigInteger(), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("ack", sa.String(length=16), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("sent_at", sa.DateTime(), nullable=True),
        sa.ForeignKeyConstraint(["schedule_id"], ["schedules.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("schedule_firings", schema=None) as batch_op:
        batch_op.create_index("ix_schedule_firings_status_time", ["status", "not_before"], unique=False)
        batch_op.create_index("ix_schedule_firings_schedule", ["schedule_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("schedule_firings", schema=None) as batch_op:
        batch_op.drop_index("ix_schedule_firings_schedule")
        batch_op.drop_index("ix_schedule_firings_status_time")
    op.drop_table("schedule_firings")
    with op.batch_alter_table("schedules", schema=None) as batch_op:
        batch_op.drop_index("ix_schedules_user_status")
        batch_op.drop_index("ix_schedules_status_next")
    op.drop_table("schedules")
