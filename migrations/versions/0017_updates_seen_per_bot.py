"""updates_seen per bot: an update id is a duplicate only for the bot that received it

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-26 10:00:00.000000

Telegram numbers updates per bot, so after a token switch (a test bot, then the real one) the new bot's
first update ids can be ones the old bot already had; keyed by update id alone, they were dropped as
duplicates. The table is keyed by (bot_id, update_id) now; bot_id is the numeric id in the token (never the
token itself). The rows it held are dropped: they name no bot, and they only matter for a day (the dedup
window, db/runtime/store.py), so at worst an update delivered again across the upgrade is answered twice.
Every bot process must run this version (the old code's INSERT names no bot).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
# Another helper may add a migration at the same time; the lead re-chains this one after it at merge.
down_revision: str | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.drop_index("ix_updates_seen_at", table_name="updates_seen")
    op.drop_table("updates_seen")
    op.create_table(
        "updates_seen",
        sa.Column("bot_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("update_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("seen_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("bot_id", "update_id"),
    )
    op.create_index("ix_updates_seen_at", "updates_seen", ["seen_at"])


def downgrade() -> None:
    op.drop_index("ix_updates_seen_at", table_name="updates_seen")
    op.drop_table("updates_seen")
    op.create_table(
        "updates_seen",
        sa.Column("update_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("seen_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("update_id"),
    )
    op.create_index("ix_updates_seen_at", "updates_seen", ["seen_at"])
