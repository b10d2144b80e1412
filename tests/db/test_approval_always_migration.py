"""Migration 0025 (issue 31 §12): "Always in this chat" becomes each person's own; the grants made before
it are kept (as their chooser's), and a second member's grant in the same chat is a row of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.orm import sessionmaker

from db.approvals import Approvals
from db.engine import make_engine
from db.migrate import downgrade, upgrade
from tests.support.postgres import TestPostgres


@pytest.fixture
def empty_url(db_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    if db_kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'data' / 'a.db'}"
        return
    server: TestPostgres = request.getfixturevalue("postgres")
    url = server.new_database(migrated=False)
    yield url
    server.drop_database(url)


def grants(url: str) -> list[tuple[int, str, int]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            query = "SELECT chat_id, tool, allowed_by FROM approval_always ORDER BY allowed_by"
            got = conn.execute(text(query))
            return [(int(r[0]), str(r[1]), int(r[2])) for r in got]
    finally:
        engine.dispose()


def test_grants_are_kept_and_become_per_person(empty_url: str) -> None:
    upgrade(empty_url, "0024")
    engine = make_engine(empty_url)
    with engine.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO approval_always (chat_id, tool, allowed_by, created_at) "
                "VALUES (-100, 'code', 111, '2026-01-01 00:00:00')"
            )
        )
    engine.dispose()
    upgrade(empty_url)
    assert grants(empty_url) == [(-100, "code", 111)]
    engine = make_engine(empty_url)
    store = Approvals(sessionmaker(engine), engine)
    store.allow_always(-100, "code", 222)
    store.allow_always(-100, "code", 222)  # idempotent
    assert store.allowed_always(-100, "code", 111) and store.allowed_always(-100, "code", 222)
    assert not store.allowed_always(-100, "code", 333)
    engine.dispose()
    assert grants(empty_url) == [(-100, "code", 111), (-100, "code", 222)]
    downgrade(empty_url, "0024")  # back to one grant per chat and tool: the earliest chooser's
    assert grants(empty_url) == [(-100, "code", 111)]
