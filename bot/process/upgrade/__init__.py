"""`python -m bot upgrade` and `python -m bot rollback`: an upgrade that proves itself before it counts.

The steps (`run.checked_upgrade`): a backup first (the full backup of `python -m bot backup`, encrypted when
backups are); a copy of the database (SQLite: a consistent file copy beside it; PostgreSQL: a scratch
database on the same server, filled from one snapshot of the live one), migrated to this code's head; a
self-test on the copy (`selftest`: doctor's local probes, one scripted turn through the real loop against a
built-in model, a recall of an existing memory, the next firings of every live schedule, the sandbox
toolkit's modules); only then the live database is migrated and the upgrade recorded (`record`, table
`upgrades`). On a failure the live database is untouched and the owner is told. The start path routes a
database behind head through the same steps (`start.ensure_schema`) unless UPGRADE_CHECK=off.
"""
