"""The upgrade's copy and rollback differ by database: the tests that take a database run on both."""

from __future__ import annotations

from tests.support.databases import both_databases

db_kind = both_databases()
