"""Which database a test runs on: a SQLite file, unless its module asks for PostgreSQL too.

The `db_kind` fixture (tests/conftest.py) says which database `database_url`, `engine`, `db_sessions` and
`bot_database` give a test; it is "sqlite" by default. Most of the code is dialect-neutral ORM, and its
tests run on SQLite only. A module whose tests drive code that differs by dialect (db/ queries, migrations,
the recall backends, the replicas' leases, the inbox and dedup SQL, the schedules' claiming) runs its
database tests on both, by overriding the fixture with one that has both databases as params:

    db_kind = both_databases()  # why this module's code differs by dialect

Only the tests of that module that take a database (directly or through another fixture) are run twice.
One test checks one database's own parts with `@sqlite_only` or `@postgresql_only`. End-to-end tests whose
bots should run on the test's database take `bot_database` (e.g. `pytestmark = pytest.mark.usefixtures(
"bot_database")`).

TEST_DATABASES=sqlite (or =postgresql) leaves the other database's copies out: TEST_DATABASES=sqlite never
starts PostgreSQL. The PostgreSQL copies are marked `slow` (they need the server started): the fast tier,
`uv run pytest -m "not slow" -n 2`, runs on SQLite alone.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

DATABASES = ("sqlite", "postgresql")


def selected_databases() -> list[str]:
    """The databases the suite runs against (TEST_DATABASES=sqlite,postgresql; both by default)."""
    wanted = os.environ.get("TEST_DATABASES", ",".join(DATABASES)).split(",")
    return [d for d in DATABASES if d in wanted]


def chosen(*kinds: str) -> list[str]:
    """Those of `kinds` that TEST_DATABASES lets run."""
    return [d for d in selected_databases() if d in kinds]


def params(*kinds: str) -> list[Any]:
    """Those of `kinds` that TEST_DATABASES lets run, as params; PostgreSQL's marked `slow`: the fast tier
    (`-m "not slow"`) never starts the server."""
    return [pytest.param(d, marks=pytest.mark.slow) if d == "postgresql" else d for d in chosen(*kinds)]


def both_databases() -> Any:
    """A `db_kind` fixture over SQLite and PostgreSQL: assign it to `db_kind` in a test module."""

    @pytest.fixture(params=params(*DATABASES))
    def db_kind(request: pytest.FixtureRequest) -> str:
        """This module's database tests run on each database in turn."""
        return str(request.param)

    return db_kind


# One test on one database (in a module that runs on both, or for PostgreSQL's own parts anywhere). When
# TEST_DATABASES leaves that database out, the test is skipped ("got empty parameter set").
sqlite_only = pytest.mark.parametrize("db_kind", params("sqlite"), indirect=True)
postgresql_only = pytest.mark.parametrize("db_kind", params("postgresql"), indirect=True)
