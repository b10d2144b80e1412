"""memories on PostgreSQL: recall's scans run in the backend that asks (no parallel workers)

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-23 17:00:00.000000

A recall's bit-vector search reads one user's entries of ix_memories_user_bits (100k index tuples for a user
with 100k memories, about 10 MB). PostgreSQL plans a parallel index-only scan for that size, which starts two
workers for a query of about 10 ms: on a server answering many users at once (2 cores here, bench/bench_pg.py)
the workers wait for CPU, and the query took as long as or longer than in one process (median 22 vs 26 ms,
35.6 vs 37.6 ms, 10.5-11.7 vs 18.6-21 ms at lighter load) while using up to three processes.
`parallel_workers = 0` on the table turns parallel scans of `memories` off; nothing else changes.

SQLite: nothing to do (no parallel query).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0015"
# 0014 is written at the same time by someone else; the lead re-chains this one after it at merge.
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# PostgreSQL only: a storage parameter of the table.
PG_UPGRADE = ("ALTER TABLE memories SET (parallel_workers = 0)",)
PG_DOWNGRADE = ("ALTER TABLE memories RESET (parallel_workers)",)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in PG_UPGRADE:
            op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in PG_DOWNGRADE:
            op.execute(statement)
