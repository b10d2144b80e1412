"""memories_fts: owner-prefixed words instead of an owner column, written by db/memories.py

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23 10:00:00.000000

In 0002 every row had an `owner` token and a search matched `owner:"u7" AND content:(...)`: FTS5 read each
word's doclist across all users and BM25 counted document frequencies across users. Here every indexed word
starts with its owner ("7xberlin"), so a word's doclist holds one user's rows. A trigger cannot split text
into words, so db/memories.py writes the FTS row with the memory (its insert and update triggers are dropped);
the delete trigger of 0002 stays. Upgrade rebuilds the index from memories; downgrade rebuilds the 0002 table
and its triggers.

On PostgreSQL nothing changes: the generated tsvector column of 0002 is searched within the user already.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Migrations do not import application code: fts_text here is db.memory_words.fts_text.
FTS_DDL = (
    "CREATE VIRTUAL TABLE memories_fts USING fts5(content, tokenize='porter unicode61 remove_diacritics 2')"
)
OLD_FTS_DDL = (
    "CREATE VIRTUAL TABLE memories_fts USING fts5("
    "content, owner, tokenize='porter unicode61 remove_diacritics 2')"
)
OLD_TRIGGERS = (
    "CREATE TRIGGER memories_fts_ai AFTER INSERT ON memories BEGIN "
    "INSERT INTO memories_fts(rowid, content, owner) VALUES (new.id, new.content, 'u' || new.user_id); END",
    "CREATE TRIGGER memories_fts_au AFTER UPDATE OF content, user_id ON memories BEGIN "
    "UPDATE memories_fts SET content = new.content, owner = 'u' || new.user_id WHERE rowid = new.id; END",
)
_FTS_WORD = re.compile(r"[^\W_]+", re.UNICODE)
BATCH = 5000


def fts_text(user_id: int, content: str) -> str:
    uid = int(user_id)
    prefix = f"{'n' if uid < 0 else ''}{abs(uid)}x"
    return " ".join(prefix + w for w in _FTS_WORD.findall(unicodedata.normalize("NFC", content).lower()))


def upgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.execute("DROP TRIGGER IF EXISTS memories_fts_ai")
    op.execute("DROP TRIGGER IF EXISTS memories_fts_au")
    op.execute("DROP TABLE IF EXISTS memories_fts")
    op.execute(FTS_DDL)
    bind = op.get_bind()
    last = 0
    while True:
        rows = bind.execute(
            sa.text("SELECT id, user_id, content FROM memories WHERE id > :last ORDER BY id LIMIT :n"),
            {"last": last, "n": BATCH},
        ).all()
        if not rows:
            break
        bind.execute(
            sa.text("INSERT INTO memories_fts(rowid, content) VALUES (:id, :c)"),
            [{"id": r[0], "c": fts_text(r[1], r[2])} for r in rows],
        )
        last = int(rows[-1][0])
    op.execute("INSERT INTO memories_fts(memories_fts) VALUES ('optimize')")


def downgrade() -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    op.execute("DROP TABLE IF EXISTS memories_fts")
    op.execute(OLD_FTS_DDL)
    op.execute(
        "INSERT INTO memories_fts(rowid, content, owner) SELECT id, content, 'u' || user_id FROM memories"
    )
    for trigger in OLD_TRIGGERS:
        op.execute(trigger)
