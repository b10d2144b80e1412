"""inbox.media: what a waiting voice note, photo or file brought (its media rows, the transcript)

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-23 15:10:00.000000

- inbox.media: JSON, NULL for a text message; {"ids": [media_files ids], "heard": transcript or null,
  "speak": true when the answer also goes out as a voice note}. A media message waits in the inbox like a
  text one, so a restart before its turn answers it with its photos and its "heard" line.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("inbox", sa.Column("media", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("inbox") as batch:
        batch.drop_column("media")
