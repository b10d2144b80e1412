"""watchdog events: the conditions each process's watchdog noticed

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-03 13:30:00.000000

- watchdog_events(id, condition, process, started, ended, cause): a condition the watchdog of a process
  (bot/runtime/vigil/) noticed (polling stalled, answers undelivered, a firing stuck in sending, the job
  lease not renewed, the sandbox service unreachable, the webhook not delivering), from its onset to when it
  cleared (NULL while it lasts, or when the process died during it), with its cause. `python -m bot doctor`
  counts them.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "watchdog_events",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("condition", sa.String(32), nullable=False),
        sa.Column("process", sa.String(64), nullable=False),
        sa.Column("started", sa.DateTime(), nullable=False),
        sa.Column("ended", sa.DateTime(), nullable=True),
        sa.Column("cause", sa.Text(), nullable=False),
    )
    op.create_index("ix_watchdog_events_started", "watchdog_events", ["started"])


def downgrade() -> None:
    op.drop_index("ix_watchdog_events_started", table_name="watchdog_events")
    op.drop_table("watchdog_events")
