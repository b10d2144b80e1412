"""Moving machines, PostgreSQL to SQLite: `python -m bot migrate-db --to sqlite:///...` copies every table,
verified table by table (SQLite to PostgreSQL is tests/bot/test_migrate_db.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.process.ops import migrate_database
from db.engine import make_engine
from db.snapshot import sqlite_url
from tests.backup.helpers import counts, fill, memory_count, message_texts
from tests.support.databases import postgresql_only
from tests.support.fakes.openai_api import FakeLLM
from tests.support.harness import make_settings


@postgresql_only
async def test_postgresql_moves_to_a_new_sqlite_file_verified_table_by_table(
    database_url: str, tmp_path: Path
) -> None:
    source = make_engine(database_url)
    await fill(source, tmp_path / "media", 111)
    await fill(source, tmp_path / "media", 222)
    settings = make_settings(tmp_path, None, FakeLLM(), database_url=database_url)
    lines: list[str] = []
    target = sqlite_url(tmp_path / "moved" / "assistant.db")
    assert migrate_database(settings, target, lines.append)
    moved = make_engine(target)
    assert counts(moved) == counts(source) and message_texts(moved) == message_texts(source)
    assert memory_count(moved) == 4
    assert "messages: 12 row(s) copied, the target has 12" in lines
    assert any(line.startswith("done:") and "every count agrees" in line for line in lines)
    with pytest.raises(ValueError, match="must name a new SQLite file"):  # never over an existing database
        migrate_database(settings, target, lines.append)
    moved.dispose()
    source.dispose()
