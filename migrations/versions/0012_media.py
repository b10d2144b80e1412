"""media: files the users sent (voice, photos, documents), transcription seconds, files a code run wrote

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-23 15:00:00.000000

- media_files: one row per file a user sent; the bytes live hash-named under MEDIA_DIR (`sha256`), the
  extracted text of a document next to them. `message_id` links the user message it came with; `kind` is
  voice | audio | video_note | photo | image | document; `duration_s` the length of audio; `status` says what
  became of it (ok | transcribed | extracted | too_big | failed | rejected ...).
- llm_calls.audio_seconds: seconds of audio of a transcription call, priced per minute.
- code_executions.files_out: names and sizes of the files a run wrote under out/ and that went to the chat.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "media_files",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("user_id", sa.BigInteger(), nullable=False),
        sa.Column("chat_id", sa.BigInteger(), nullable=False),
        sa.Column("session_id", sa.String(length=36), nullable=True),
        sa.Column("message_id", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("file_name", sa.String(length=255), nullable=False),
        sa.Column("mime_type", sa.String(length=128), nullable=True),
        sa.Column("size", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("sha256", sa.String(length=64), nullable=True),
        sa.Column("duration_s", sa.Integer(), nullable=True),
        sa.Column("text_chars", sa.Integer(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("detail", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_media_files_session", "media_files", ["session_id", "id"])
    op.create_index("ix_media_files_message", "media_files", ["message_id"])
    op.add_column("llm_calls", sa.Column("audio_seconds", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("code_executions", sa.Column("files_out", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("code_executions") as batch:
        batch.drop_column("files_out")
    with op.batch_alter_table("llm_calls") as batch:
        batch.drop_column("audio_seconds")
    op.drop_index("ix_media_files_message", table_name="media_files")
    op.drop_index("ix_media_files_session", table_name="media_files")
    op.drop_table("media_files")
