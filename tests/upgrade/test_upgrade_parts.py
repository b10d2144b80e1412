"""The upgrade's parts that need no process: the version a checkout or a Docker image reports, the probe of
a SQLite file a bot has open, UPGRADE_CHECK=off, and a database newer than this code."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.config.settings import Settings
from bot.process.upgrade.errors import UpgradeFailed
from bot.process.upgrade.inuse import sqlite_in_use
from bot.process.upgrade.run import checked_upgrade
from bot.process.upgrade.start import ensure_schema
from bot.runtime.version import git_commit, previous_commit, project_version, version_line
from db.engine import make_engine
from db.migrate import head_revision, upgrade
from db.snapshot import revision_of
from tests.upgrade.helpers import PREVIOUS

SHA = "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b"
OLD = "0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a2f1e"


def settings(tmp_path: Path, **values: Any) -> Settings:
    base: dict[str, Any] = {
        "database_url": f"sqlite:///{tmp_path / 'data' / 'assistant.db'}",
        "backup_dir": str(tmp_path / "data" / "backups"),
        "media_dir": str(tmp_path / "data" / "media"),
        "openai_api_key": "sk-test",
    }
    base.update(values)
    return Settings(_env_file=None, **base)  # type: ignore[call-arg]


def test_the_version_is_pyprojects_with_the_git_commit_when_there_is_one(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\nversion = "1.2.3"\n')
    assert project_version(tmp_path) == "1.2.3"
    assert git_commit(tmp_path) is None  # a Docker image: no .git
    git = tmp_path / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "packed-refs").write_text(f"# pack-refs with: peeled\n{SHA} refs/heads/main\n")
    assert git_commit(tmp_path) == SHA
    (git / "refs" / "heads" / "main").write_text(SHA + "\n")
    (git / "logs").mkdir()
    zero = "0" * 40
    (git / "logs" / "HEAD").write_text(
        f"{zero} {OLD} A <a@b> 1 +0000\tclone\n{OLD} {SHA} A <a@b> 2 +0000\tpull: Fast-forward\n"
    )
    assert previous_commit(tmp_path) == OLD  # what ran before the pull
    (tmp_path / "pyproject.toml").write_text("not toml [")
    assert project_version(tmp_path) == "unknown"


def test_the_version_line_says_when_the_database_was_upgraded() -> None:
    assert version_line(None).startswith("Version ")
    line = version_line(datetime(2026, 12, 3, 13, 5, tzinfo=UTC), "0.1.0+gabc1234")
    assert line.endswith(", upgraded 2026-12-03 13:05 UTC from 0.1.0+gabc1234")


def test_a_sqlite_file_open_in_another_process_is_in_use(tmp_path: Path) -> None:
    db = tmp_path / "assistant.db"
    engine = make_engine(f"sqlite:///{db}")  # WAL, as the bot opens it
    with engine.connect() as conn:
        conn.exec_driver_sql("CREATE TABLE t (x)")
        conn.commit()
    engine.dispose()
    assert not sqlite_in_use(db)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('SELECT * FROM t').fetchall(); "
            "print('open', flush=True); sys.stdin.read()",
            str(db),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        assert sqlite_in_use(db)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
    assert not sqlite_in_use(db)


def test_upgrade_check_off_migrates_at_once_without_a_backup(tmp_path: Path) -> None:
    s = settings(tmp_path, upgrade_check="off")
    (tmp_path / "data").mkdir()
    upgrade(s.database_url, PREVIOUS)
    ensure_schema(s)
    engine = make_engine(s.database_url)
    with engine.connect() as conn:
        assert revision_of(conn) == head_revision()
    engine.dispose()
    assert not (tmp_path / "data" / "backups").exists()


def test_an_empty_database_is_simply_migrated(tmp_path: Path) -> None:
    s = settings(tmp_path)
    (tmp_path / "data").mkdir()
    ensure_schema(s)
    engine = make_engine(s.database_url)
    with engine.connect() as conn:
        assert revision_of(conn) == head_revision()
    engine.dispose()
    assert sorted(
        p.name for p in (tmp_path / "data").iterdir() if not p.name.startswith("assistant.db-")
    ) == ["assistant.db"]  # no backup, no lock file


def test_a_database_newer_than_this_code_is_refused_untouched(tmp_path: Path) -> None:
    s = settings(tmp_path)
    (tmp_path / "data").mkdir()
    upgrade(s.database_url)
    engine = make_engine(s.database_url)
    with engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '9999'")
    engine.dispose()
    with pytest.raises(UpgradeFailed) as failed:
        checked_upgrade(s, say=lambda _: None)
    assert failed.value.line() == (
        f"Upgrade failed while planning: the database is at schema revision 9999, which this code does not "
        f"know (newest {head_revision()}): run the version of the bot that made it; the live database is "
        "unchanged (schema revision 9999)."
    )
    assert not (tmp_path / "data" / "backups").exists()
