"""replicas: several bot processes on one database (update dedup, chat and job leases, who is alive)

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-23 17:00:00.000000

- replicas: one row per running bot process, its heartbeat; a process whose heartbeat is older than
  REPLICA_LEASE_S is dead, and whatever it held (chats, jobs, background code jobs) moves to a live one.
- chat_leases: which process drives a chat (takes its waiting messages, runs its turns); the running turn
  (its number and who asked) and a /stop request for it, so a /stop that reached another process gets there.
- job_leases: which process runs a periodic job (reminders, session rollover, memory expiry, pruning).
- updates_seen: every Telegram update id handled, so a duplicate or retried delivery is handled once.
- inbox: update_id (the order Telegram gave), rerun_of and reply_to (a /retry or an edit waits here too,
  so any process can run it); an index on (chat_id, id) for a chat's queue.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "replicas",
        sa.Column("id", sa.String(length=64), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("pid_start", sa.String(length=32), nullable=False),
        sa.Column("started_at", sa.DateTime(), nullable=False),
        sa.Column("heartbeat_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_table(
        "chat_leases",
        sa.Column("chat_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("holder", sa.String(length=64), nullable=False),
        sa.Column("since", sa.DateTime(), nullable=False),
        sa.Column("turn", sa.BigInteger(), nullable=True),
        sa.Column("turn_owner", sa.BigInteger(), nullable=True),
        sa.Column("stop", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint("chat_id"),
    )
    op.create_index("ix_chat_leases_holder", "chat_leases", ["holder"])
    op.create_table(
        "job_leases",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("holder", sa.String(length=64), nullable=False),
        sa.Column("since", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "updates_seen",
        sa.Column("update_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("seen_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("update_id"),
    )
    op.create_index("ix_updates_seen_at", "updates_seen", ["seen_at"])
    op.add_column("inbox", sa.Column("update_id", sa.BigInteger(), nullable=True))
    op.add_column("inbox", sa.Column("rerun_of", sa.Integer(), nullable=True))
    op.add_column("inbox", sa.Column("reply_to", sa.BigInteger(), nullable=True))
    op.create_index("ix_inbox_chat", "inbox", ["chat_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_inbox_chat", table_name="inbox")
    with op.batch_alter_table("inbox") as batch:
        batch.drop_column("reply_to")
        batch.drop_column("rerun_of")
        batch.drop_column("update_id")
    op.drop_index("ix_updates_seen_at", table_name="updates_seen")
    op.drop_table("updates_seen")
    op.drop_table("job_leases")
    op.drop_index("ix_chat_leases_holder", table_name="chat_leases")
    op.drop_table("chat_leases")
    op.drop_table("replicas")
