"""task costs: LLM calls attributed to the scheduled task run they were made for; a task's monthly limit

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-28 10:00:00.000000

- llm_calls.schedule_id, llm_calls.firing_id: the scheduled task (and its firing, one run) a call was made
  for, NULL for every other call. A task's spend this month, the cost of each run (the median a forecast
  and the anomaly check use) are read from them, so a crash mid-run loses no attribution. Indexed by
  (schedule_id, created_at): the monthly spend of one task is read before every request of its run.
- schedules.max_cost_per_month: USD a task may spend in a calendar month (the user's zone), NULL: no limit.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
# Another helper may add a migration at the same time; the lead re-chains this one after it at merge.
down_revision: str | None = "0018"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("llm_calls", sa.Column("schedule_id", sa.Integer(), nullable=True))
    op.add_column("llm_calls", sa.Column("firing_id", sa.Integer(), nullable=True))
    op.create_index("ix_llm_calls_schedule_time", "llm_calls", ["schedule_id", "created_at"])
    op.add_column("schedules", sa.Column("max_cost_per_month", sa.Double(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("schedules") as batch:
        batch.drop_column("max_cost_per_month")
    op.drop_index("ix_llm_calls_schedule_time", table_name="llm_calls")
    with op.batch_alter_table("llm_calls") as batch:
        batch.drop_column("firing_id")
        batch.drop_column("schedule_id")
