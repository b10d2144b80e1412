"""conversation control: Telegram message ids on messages (edits, replies), edit time, per-chat settings

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23 14:15:00.000000

`messages.tg_message_id` is the Telegram id of a user message, so an edit of it can be found; `edited_at`
marks a message whose text the user changed. Message status gains values without a schema change:
`stopped` (a turn stopped by the user) and `superseded` (an answer replaced by /retry or an edit; kept, left
out of the history). `chat_settings` holds what a chat chose, for now its model (NULL: the default).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tg_message_id", sa.BigInteger(), nullable=True))
        batch_op.add_column(sa.Column("edited_at", sa.DateTime(), nullable=True))
        batch_op.create_index("ix_messages_chat_tg", ["chat_id", "tg_message_id"], unique=False)
    op.create_table(
        "chat_settings",
        sa.Column("chat_id", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("model", sa.String(length=128), nullable=True),
        sa.Column("updated_by", sa.BigInteger(), nullable=True),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("chat_id"),
    )


def downgrade() -> None:
    op.drop_table("chat_settings")
    with op.batch_alter_table("messages", schema=None) as batch_op:
        batch_op.drop_index("ix_messages_chat_tg")
        batch_op.drop_column("edited_at")
        batch_op.drop_column("tg_message_id")
