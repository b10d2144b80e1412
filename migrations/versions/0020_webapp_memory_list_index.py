"""memories by (user_id, updated_at): the app's memory list, newest first, without sorting every row

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-26 13:00:00.000000

The app (bot/webapp) lists a user's current memories most recently changed first, 50 at a time; /memory lists
the same way. With only (user_id, layer, created_at) every row of the user was read and sorted: 12 ms for a
user with 10,000 memories, 25 ms for a page 5,000 rows down; with this index it is about 1 ms and 8 ms
(bench/bench_webapp.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0020"
down_revision: str | None = "0019"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_memories_user_updated", "memories", ["user_id", "updated_at"])


def downgrade() -> None:
    op.drop_index("ix_memories_user_updated", table_name="memories")
