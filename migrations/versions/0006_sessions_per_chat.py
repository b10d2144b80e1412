"""sessions per user and chat: sessions.chat_type and an index on the open session of (user, chat)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23 14:00:00.000000

Until now a user had one open session across all chats, so a group turn read the user's private
conversation. `sessions.chat_id` existed but only recorded where a session was opened, and such a session
may hold private messages; every existing session becomes the user's private one (chat id = user id, which
is what a private chat's id is) so that no old private history can surface in a group. Downgrade drops the
type and restores the per-user index; the chat ids stay (they are valid for the old schema).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("chat_type", sa.String(length=16), server_default="private", nullable=False)
        )
        batch_op.drop_index("ix_sessions_user_open")
        batch_op.create_index("ix_sessions_user_chat_open", ["user_id", "chat_id", "ended_at"], unique=False)
    op.execute(sa.text("UPDATE sessions SET chat_id = user_id, chat_type = 'private'"))


def downgrade() -> None:
    with op.batch_alter_table("sessions", schema=None) as batch_op:
        batch_op.drop_index("ix_sessions_user_chat_open")
        batch_op.create_index("ix_sessions_user_open", ["user_id", "ended_at"], unique=False)
        batch_op.drop_column("chat_type")
