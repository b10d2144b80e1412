"""db/ is where the dialects differ (raw SQL, upserts, locks, the recall backends, migrations): every
database test here runs on SQLite and on PostgreSQL (tests/support/databases.py)."""

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine

from db.engine import make_engine
from tests.support.databases import both_databases

db_kind = both_databases()


@pytest.fixture
def other_engine(database_url: str) -> Iterator[Engine]:
    """Another process on the test's database: an engine of its own, on connections of its own."""
    eng = make_engine(database_url)
    yield eng
    eng.dispose()
