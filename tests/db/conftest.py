"""db/ is where the dialects differ (raw SQL, upserts, locks, the recall backends, migrations): every
database test here runs on SQLite and on PostgreSQL (tests/support/databases.py)."""

from tests.support.databases import both_databases

db_kind = both_databases()
