"""memory revision: a user's counter of changes to their memories, kept by the database

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-27 01:00:00.000000

- memory_revisions(user_id, revision): moved by triggers for every memory row of the user inserted, updated
  or deleted, whoever writes (any process, any code path, a bulk import or an erase). A process keeps what
  each turn's prompt reads of a user's memories (db/memory_cache.py) and reads it again only when the
  revision moved.
- A user's first revision is a random number: a row deleted and made again (or a database restored under
  a process that kept an older read) does not come back to a value a process may have kept.
- Not a model: bookkeeping of the database itself (like 0018's memories_vec_versions), neither a user's
  data to export nor a table to copy (a copy's triggers count the memories it copies).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0024"
down_revision: str | None = "0023"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# A first revision is random, below 2**52 (4503599627370496).
_BUMP_SQLITE = (
    "INSERT INTO memory_revisions (user_id, revision) "
    "VALUES ({row}.user_id, abs(random() % 4503599627370496)) "
    "ON CONFLICT (user_id) DO UPDATE SET revision = revision + 1"
)
SQLITE = (
    "CREATE TABLE memory_revisions (user_id INTEGER PRIMARY KEY, revision BIGINT NOT NULL)",
    "CREATE TRIGGER memories_revision_inserted AFTER INSERT ON memories BEGIN "
    f"{_BUMP_SQLITE.format(row='NEW')}; END",
    # (a memory never moves to another user)
    "CREATE TRIGGER memories_revision_updated AFTER UPDATE ON memories BEGIN "
    f"{_BUMP_SQLITE.format(row='NEW')}; END",
    "CREATE TRIGGER memories_revision_deleted AFTER DELETE ON memories BEGIN "
    f"{_BUMP_SQLITE.format(row='OLD')}; END",
)
# PostgreSQL: once per statement and user (a bulk import or an erase moves each user's row once), users in
# id order (two statements over several users cannot deadlock on their rows). Each trigger names its
# transition table `changed`, so one function serves the three.
POSTGRESQL = (
    "CREATE TABLE memory_revisions (user_id bigint PRIMARY KEY, revision bigint NOT NULL)",
    "CREATE FUNCTION memory_revisions_bump() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "INSERT INTO memory_revisions AS r (user_id, revision) "
    "SELECT c.user_id, floor(random() * 4503599627370496)::bigint "
    "FROM (SELECT DISTINCT user_id FROM changed) AS c "
    "ORDER BY c.user_id ON CONFLICT (user_id) DO UPDATE SET revision = r.revision + 1; RETURN NULL; END $$",
    "CREATE TRIGGER memories_revision_inserted AFTER INSERT ON memories REFERENCING NEW TABLE AS changed "
    "FOR EACH STATEMENT EXECUTE FUNCTION memory_revisions_bump()",
    "CREATE TRIGGER memories_revision_updated AFTER UPDATE ON memories REFERENCING NEW TABLE AS changed "
    "FOR EACH STATEMENT EXECUTE FUNCTION memory_revisions_bump()",
    "CREATE TRIGGER memories_revision_deleted AFTER DELETE ON memories REFERENCING OLD TABLE AS changed "
    "FOR EACH STATEMENT EXECUTE FUNCTION memory_revisions_bump()",
    # TRUNCATE has no transition table: every user's revision moves.
    "CREATE FUNCTION memory_revisions_bump_all() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "UPDATE memory_revisions SET revision = revision + 1; RETURN NULL; END $$",
    "CREATE TRIGGER memories_revision_truncated AFTER TRUNCATE ON memories "
    "FOR EACH STATEMENT EXECUTE FUNCTION memory_revisions_bump_all()",
)


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for statement in POSTGRESQL if postgres else SQLITE:
        op.execute(statement)


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    names = (
        ("inserted", "updated", "deleted", "truncated") if postgres else ("inserted", "updated", "deleted")
    )
    for name in names:
        op.execute(f"DROP TRIGGER IF EXISTS memories_revision_{name}" + (" ON memories" if postgres else ""))
    if postgres:
        op.execute("DROP FUNCTION IF EXISTS memory_revisions_bump()")
        op.execute("DROP FUNCTION IF EXISTS memory_revisions_bump_all()")
    op.execute("DROP TABLE IF EXISTS memory_revisions")
