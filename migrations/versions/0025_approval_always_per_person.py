"""approval_always per person: "Always in this chat" allows the tool for the one who chose it

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-02 02:00:00.000000

- approval_always's key was (chat_id, tool): in a group, one member's "Always in this chat" let every
  member's calls of the tool run unasked. The key is now (chat_id, tool, allowed_by): a grant counts only
  for the calls of the person who chose it. The rows kept are each their chooser's own grant.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
# Another helper may add a migration at the same time; the lead re-chains this one after it at merge.
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _key(columns: list[str]) -> None:
    """approval_always with the primary key `columns`, its rows kept."""
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint("approval_always_pkey", "approval_always", type_="primary")
        op.create_primary_key("approval_always_pkey", "approval_always", columns)
        return
    # SQLite cannot change a primary key in place: a new table, the rows copied, the old one dropped.
    op.create_table(
        "approval_always_new",
        sa.Column("chat_id", sa.BigInteger(), nullable=False, autoincrement=False),
        sa.Column("tool", sa.String(length=200), nullable=False),
        sa.Column("allowed_by", sa.BigInteger(), nullable=False, autoincrement=False),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint(*columns),
    )
    op.execute(
        "INSERT INTO approval_always_new (chat_id, tool, allowed_by, created_at) "
        "SELECT chat_id, tool, allowed_by, created_at FROM approval_always"
    )
    op.drop_table("approval_always")
    op.rename_table("approval_always_new", "approval_always")


def upgrade() -> None:
    _key(["chat_id", "tool", "allowed_by"])


def downgrade() -> None:
    # Back to one grant per (chat, tool): the earliest chooser's grant stays.
    op.execute(
        "DELETE FROM approval_always WHERE EXISTS (SELECT 1 FROM approval_always o "
        "WHERE o.chat_id = approval_always.chat_id AND o.tool = approval_always.tool "
        "AND (o.created_at < approval_always.created_at OR (o.created_at = approval_always.created_at "
        "AND o.allowed_by < approval_always.allowed_by)))"
    )
    _key(["chat_id", "tool"])
