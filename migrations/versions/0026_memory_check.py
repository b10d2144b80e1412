"""memory check: the last self-check of each user's memories

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-02 03:00:00.000000

- memory_checks(user_id, checked_at, memories, findable, repaired_vectors, repaired_words, seconds,
  told_below): what the nightly self-check (core_tools/memory/selfcheck.py) found for a user: how many of
  their current memories recall found in its top 5 by a short cue, what it repaired on the way, how long it
  took, and whether the owner was told of the current fall below 95 %. One row per user, overwritten.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
# Another helper may add a migration at the same time; the lead re-chains this one after it at merge.
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "memory_checks",
        sa.Column("user_id", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("checked_at", sa.DateTime(), nullable=False),
        sa.Column("memories", sa.Integer(), nullable=False),
        sa.Column("findable", sa.Integer(), nullable=False),
        sa.Column("repaired_vectors", sa.Integer(), nullable=False),
        sa.Column("repaired_words", sa.Integer(), nullable=False),
        sa.Column("seconds", sa.Double(), nullable=False),
        sa.Column("told_below", sa.Boolean(), server_default=sa.false(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("memory_checks")
