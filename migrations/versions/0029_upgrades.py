"""upgrades: each checked upgrade of the database (python -m bot upgrade)

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-03 13:30:00.000000

- upgrades(id, upgraded_at, from_version, to_version, from_revision, to_revision, backup, seconds): one row
  per upgrade that proved itself on a copy before the live database was migrated (bot/process/upgrade/):
  the code versions before and after (pyproject's version, with the git commit when known), the schema
  revisions, when, the backup taken first (its name in BACKUP_DIR, which `python -m bot rollback`
  restores) and how long the whole upgrade took.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "upgrades",
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column("upgraded_at", sa.DateTime(), nullable=False),
        sa.Column("from_version", sa.String(length=100), nullable=True),
        sa.Column("to_version", sa.String(length=100), nullable=False),
        sa.Column("from_revision", sa.String(length=40), nullable=True),
        sa.Column("to_revision", sa.String(length=40), nullable=False),
        sa.Column("backup", sa.String(length=255), nullable=True),
        sa.Column("seconds", sa.Double(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("upgrades")
