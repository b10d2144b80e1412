"""forum topics: each topic of a forum supergroup is a conversation of its own

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-26 10:00:00.000000

`forum_topics` numbers the (chat id, thread id) pairs of the topics that talked to the bot. A topic's
session, inbox rows, lease, schedules and files use `-(2**53 + id)` as their chat id (db/topics.py): no
Telegram id is that large, so existing rows keep their meaning and no other table changes. Private chats,
groups and a forum's General topic keep their chat id as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
# Other helpers may add a migration at the same time; the lead re-chains this one at merge.
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "forum_topics",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("thread_id", sa.BigInteger(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("chat_id", "thread_id", name="uq_forum_topics_chat_thread"),
    )


def downgrade() -> None:
    op.drop_table("forum_topics")
