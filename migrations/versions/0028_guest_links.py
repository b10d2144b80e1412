"""guest links: questions asked as a guest or inline, behind a short-lived token

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-03 13:30:00.000000

- guest_links(token, user_id, kind, question, created_at, expires_at, used_at): a question asked in guest
  or inline mode (bot/adapter/guest.py, inline.py). kind "private": the "continue in private" deep link
  (/start <token>) runs it as a private turn; kind "inline": an inline query's "ask" result, answered where
  it was posted. Each is used once, before it expires; expired rows are deleted as new ones are made.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "guest_links",
        sa.Column("token", sa.String(64), primary_key=True),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.Column("expires_at", sa.DateTime(), nullable=False),
        sa.Column("used_at", sa.DateTime(), nullable=True),
    )
    op.create_index("ix_guest_links_expires", "guest_links", ["expires_at"])


def downgrade() -> None:
    op.drop_index("ix_guest_links_expires", table_name="guest_links")
    op.drop_table("guest_links")
