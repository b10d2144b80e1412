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
# PostgreSQL: once per statement, by the rows it changed in each session (a copy or an erase of many
# messages updates each session's row once, not once per message). A trigger with transition tables has
# one event: three triggers, one function each way.
_BUMP_BY = (
    "UPDATE sessions SET history_rev = history_rev + c.n FROM (SELECT session_id, count(*) AS n FROM {rows} "
    "GROUP BY session_id) AS c WHERE sessions.id = c.session_id"
)
TRIGGERS_POSTGRESQL = (
    "CREATE FUNCTION messages_history_new() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    f"{_BUMP_BY.format(rows='new_rows')}; RETURN NULL; END $$",
    "CREATE FUNCTION messages_history_old() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    f"{_BUMP_BY.format(rows='old_rows')}; RETURN NULL; END $$",
    "CREATE TRIGGER messages_history_inserted AFTER INSERT ON messages REFERENCING NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION messages_history_new()",
    "CREATE TRIGGER messages_history_updated AFTER UPDATE ON messages REFERENCING NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION messages_history_new()",
    "CREATE TRIGGER messages_history_deleted AFTER DELETE ON messages REFERENCING OLD TABLE AS old_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION messages_history_old()",
)


def upgrade() -> None:
    op.add_column("sessions", sa.Column("history_rev", sa.BigInteger(), nullable=False, server_default="0"))
    postgres = op.get_bind().dialect.name == "postgresql"
    for statement in TRIGGERS_POSTGRESQL if postgres else TRIGGERS_SQLITE:
        op.execute(statement)


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for name in ("inserted", "updated", "deleted"):
        op.execute(f"DROP TRIGGER IF EXISTS messages_history_{name}" + (" ON messages" if postgres else ""))
    if postgres:
        op.execute("DROP FUNCTION IF EXISTS messages_history_new()")
        op.execute("DROP FUNCTION IF EXISTS messages_history_old()")
    with op.batch_alter_table("sessions") as batch:
        batch.drop_column("history_rev")
