"""history revision: a session's counter of changes to its messages, kept by the database

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-26 22:00:00.000000

- sessions.history_rev: raised by one for every message row of the session inserted, updated or deleted,
  by triggers, whoever writes (any process, any code path, a cascade). A process keeps the histories it
  read with their revision (db/history_cache.py) and reads a history again only when the revision moved
  by more than its own writes.
- A later migration that rebuilds `messages` on SQLite (a batch "move and copy") drops its triggers: it
  must create them again (TRIGGERS_SQLITE below).
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_BUMP = "UPDATE sessions SET history_rev = history_rev + 1 WHERE id = {row}.session_id"
TRIGGERS_SQLITE = (
    f"CREATE TRIGGER messages_history_inserted AFTER INSERT ON messages BEGIN {_BUMP.format(row='NEW')}; END",
    # (a message never moves to another session)
    f"CREATE TRIGGER messages_history_updated AFTER UPDATE ON messages BEGIN {_BUMP.format(row='NEW')}; END",
    f"CREATE TRIGGER messages_history_deleted AFTER DELETE ON messages BEGIN {_BUMP.format(row='OLD')}; END",
)
TRIGGERS_POSTGRESQL = (
    "CREATE FUNCTION messages_history_changed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    f"IF TG_OP = 'DELETE' THEN {_BUMP.format(row='OLD')}; ELSE {_BUMP.format(row='NEW')}; END IF; "
    "RETURN NULL; END $$",
    "CREATE TRIGGER messages_history_changed AFTER INSERT OR UPDATE OR DELETE ON messages "
    "FOR EACH ROW EXECUTE FUNCTION messages_history_changed()",
)


def upgrade() -> None:
    op.add_column("sessions", sa.Column("history_rev", sa.BigInteger(), nullable=False, server_default="0"))
    postgres = op.get_bind().dialect.name == "postgresql"
    for statement in TRIGGERS_POSTGRESQL if postgres else TRIGGERS_SQLITE:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS messages_history_changed ON messages")
        op.execute("DROP FUNCTION IF EXISTS messages_history_changed()")
    else:
        for name in ("inserted", "updated", "deleted"):
            op.execute(f"DROP TRIGGER IF EXISTS messages_history_{name}")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("history_rev")
