"""memories on PostgreSQL: a version per user of the bit vectors, and a log of the rows each version changed

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-27 10:00:00.000000

Recall on PostgreSQL searches a copy of the user's bit vectors kept in the process (db/recall_cache.py). A
copy is used only while it is as new as the database: every statement that changes a user's vector rows
(a row with bits inserted or deleted; a row's bits, layer, owner or id changed) bumps the user's counter in
`memories_vec_versions`, in the same transaction, by triggers on `memories`, so every writer (each
replica, a bulk delete, the re-quantizing after a new center, COPY) is counted, not only db/memories.py.
The ids it changed go to `memories_vec_log` under the new version, so a copy a few versions old reads only
those rows again. A statement that changes more than 1000 of a user's rows, and any change of the
quantization center, logs nothing and sets `reload_at` (the copy is read again whole). A user's log keeps the
last 1000 versions (pruned by the writer). A user's first counter starts at a random number: a copy
made from another database (dropped and made again, restored) cannot be taken for this one's.

The bump is an upsert of the user's row: writers of one user's memories wait for each other's commit
there, so the versions of a user are committed in order (a reader that saw version v has every log row up
to v). Users are bumped in user id order (no deadlock between two multi-user statements).

SQLite: nothing to do (recall reads sqlite-vec there).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0018"
# Another helper may add a migration at the same time; the lead re-chains this one after it at merge.
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

PG_UPGRADE = (
    "CREATE TABLE memories_vec_versions (user_id bigint PRIMARY KEY, version bigint NOT NULL, "
    "reload_at bigint NOT NULL)",
    "CREATE TABLE memories_vec_log (user_id bigint NOT NULL, version bigint NOT NULL, "
    "memory_id integer NOT NULL, PRIMARY KEY (user_id, version, memory_id))",
    # One bump per user of a statement; its changed ids logged under the new version, or `reload_at` set
    # when more than LOG_ROWS (1000) changed; the log keeps LOG_VERSIONS (1000) versions. The same numbers
    # are in db/recall_cache.py (migrations do not import application code).
    "CREATE FUNCTION memories_vec_bump(users bigint[], ids integer[]) RETURNS void LANGUAGE plpgsql AS $$ "
    "DECLARE r record; v bigint; BEGIN "
    "FOR r IN SELECT c.user_id, array_agg(DISTINCT c.memory_id) AS ids "
    "FROM unnest(users, ids) AS c(user_id, memory_id) GROUP BY c.user_id ORDER BY c.user_id LOOP "
    "INSERT INTO memories_vec_versions AS mv (user_id, version, reload_at) "
    "VALUES (r.user_id, floor(random() * 4503599627370496)::bigint, 0) "
    "ON CONFLICT (user_id) DO UPDATE SET version = mv.version + 1 RETURNING version INTO v; "
    "IF cardinality(r.ids) > 1000 THEN "
    "UPDATE memories_vec_versions SET reload_at = v WHERE user_id = r.user_id; "
    "ELSE INSERT INTO memories_vec_log (user_id, version, memory_id) SELECT r.user_id, v, unnest(r.ids); "
    "END IF; "
    "DELETE FROM memories_vec_log WHERE user_id = r.user_id AND version <= v - 1000; "
    "END LOOP; END $$",
    # Statement-level: one bump per statement and user, whatever the number of rows.
    "CREATE FUNCTION memories_vec_changed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "IF TG_OP = 'INSERT' THEN "
    "PERFORM memories_vec_bump(array_agg(n.user_id), array_agg(n.id)) FROM new_rows AS n "
    "WHERE n.embedding_bits IS NOT NULL HAVING count(*) > 0; "
    "ELSIF TG_OP = 'DELETE' THEN "
    "PERFORM memories_vec_bump(array_agg(o.user_id), array_agg(o.id)) FROM old_rows AS o "
    "WHERE o.embedding_bits IS NOT NULL HAVING count(*) > 0; "
    "ELSE "
    "PERFORM memories_vec_bump(array_agg(c.user_id), array_agg(c.id)) FROM ("
    "SELECT o.user_id, o.id FROM old_rows AS o FULL JOIN new_rows AS n ON n.id = o.id "
    "WHERE o.embedding_bits IS NOT NULL AND (n.id IS NULL OR n.user_id <> o.user_id "
    "OR n.layer IS DISTINCT FROM o.layer OR n.embedding_bits IS DISTINCT FROM o.embedding_bits) "
    "UNION ALL SELECT n.user_id, n.id FROM new_rows AS n FULL JOIN old_rows AS o ON o.id = n.id "
    "WHERE n.embedding_bits IS NOT NULL AND (o.id IS NULL OR n.user_id <> o.user_id "
    "OR n.layer IS DISTINCT FROM o.layer OR n.embedding_bits IS DISTINCT FROM o.embedding_bits)"
    ") AS c HAVING count(*) > 0; "
    "END IF; RETURN NULL; END $$",
    "CREATE TRIGGER memories_vec_inserted AFTER INSERT ON memories REFERENCING NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION memories_vec_changed()",
    "CREATE TRIGGER memories_vec_updated AFTER UPDATE ON memories "
    "REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION memories_vec_changed()",
    "CREATE TRIGGER memories_vec_deleted AFTER DELETE ON memories REFERENCING OLD TABLE AS old_rows "
    "FOR EACH STATEMENT EXECUTE FUNCTION memories_vec_changed()",
    # A new center changes what every query's bits are: every user's copy is read again whole.
    "CREATE FUNCTION memories_vec_center_changed() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "UPDATE memories_vec_versions SET version = version + 1, reload_at = version + 1; RETURN NULL; END $$",
    "CREATE TRIGGER memories_vec_center_changed AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE "
    "ON memories_vec_center FOR EACH STATEMENT EXECUTE FUNCTION memories_vec_center_changed()",
    # TRUNCATE has no transition table: every user's copy is read again whole.
    "CREATE TRIGGER memories_vec_truncated AFTER TRUNCATE ON memories "
    "FOR EACH STATEMENT EXECUTE FUNCTION memories_vec_center_changed()",
)
PG_DOWNGRADE = (
    "DROP TRIGGER IF EXISTS memories_vec_truncated ON memories",
    "DROP TRIGGER IF EXISTS memories_vec_center_changed ON memories_vec_center",
    "DROP FUNCTION IF EXISTS memories_vec_center_changed()",
    "DROP TRIGGER IF EXISTS memories_vec_deleted ON memories",
    "DROP TRIGGER IF EXISTS memories_vec_updated ON memories",
    "DROP TRIGGER IF EXISTS memories_vec_inserted ON memories",
    "DROP FUNCTION IF EXISTS memories_vec_changed()",
    "DROP FUNCTION IF EXISTS memories_vec_bump(bigint[], integer[])",
    "DROP TABLE IF EXISTS memories_vec_log",
    "DROP TABLE IF EXISTS memories_vec_versions",
)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in PG_UPGRADE:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in PG_DOWNGRADE:
            op.execute(statement)
