"""checkins: opt-in check-ins that cost nothing until something is due

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-03 13:30:00.000000

- checkins(user_id, schedule_id, enabled, cadence, weekday, at_local, digest, level, ignored, awaiting,
  last_run_at, last_sent_at, last_message_id, last_text, last_items, last_cost, created_at, updated_at):
  a user's check-in (core_tools/checkin/), its back-off after ignored ones and what the last one
  contained. Its time is a `schedules` row of kind "checkin" (fired exactly once by the reminders' job).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "checkins",
        sa.Column("user_id", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column(
            "schedule_id", sa.Integer(), sa.ForeignKey("schedules.id", ondelete="SET NULL"), nullable=True
        ),
        sa.Column("enabled", sa.Boolean(), nullable=False),
        sa.Column("cadence", sa.String(8), nullable=False),
        sa.Column("weekday", sa.Integer(), nullable=True),
        sa.Column("at_local", sa.String(5), nullable=False),
        sa.Column("digest", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("level", sa.Integer(), nullable=False),
        sa.Column("ignored", sa.Integer(), nullable=False),
        sa.Column("awaiting", sa.Boolean(), server_default=sa.false(), nullable=False),
        sa.Column("last_run_at", sa.DateTime(), nullable=True),
        sa.Column("last_sent_at", sa.DateTime(), nullable=True),
        sa.Column("last_message_id", sa.BigInteger(), nullable=True),
        sa.Column("last_text", sa.Text(), nullable=True),
        sa.Column("last_items", sa.JSON(), nullable=True),
        sa.Column("last_cost", sa.Double(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("checkins")
