"""Backups taken from a real database (SQLite and PostgreSQL), encrypted with real age keys, restored into
SQLite and PostgreSQL; and every fault the issue names, each refused with one clear message and nothing
existing overwritten."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from core_tools.backup.crypto import new_identity
from core_tools.backup.manifest import BackupError, read_manifest
from core_tools.backup.restore import Target, drill, restore
from core_tools.backup.store import list_backups
from core_tools.backup.take import BackupConfig, take_backup
from db.engine import make_engine
from db.migrate import head_revision, upgrade
from db.snapshot import sqlite_url
from tests.backup.helpers import counts, fill, memory_count, message_texts
from tests.support.databases import selected_databases
from tests.support.postgres import TestPostgres

OWNER = 111
FRIEND = 222


def tree_digest(folder: Path) -> dict[str, str]:
    """Every file under `folder` with its SHA-256: what "nothing was changed" is checked against."""
    if not folder.exists():
        return {}
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def keys(tmp_path: Path) -> tuple[str, Path]:
    """A real age key pair: the public key, and the private key in a file as age-keygen writes it."""
    secret, public = new_identity()
    keyfile = tmp_path / "key.txt"
    keyfile.write_text(f"# created: now\n# public key: {public}\n{secret}\n")
    return public, keyfile


async def test_encrypted_backup_restores_into_sqlite_and_postgresql(
    database_url: str,
    db_kind: str,
    tmp_path: Path,
    keys: tuple[str, Path],
    postgres_or_none: TestPostgres | None,
) -> None:
    public, keyfile = keys
    engine = make_engine(database_url)
    media = tmp_path / "media"
    sha = await fill(engine, media, OWNER)
    await fill(engine, media, FRIEND, file_bytes=200_000)  # spans several parts
    before, texts = counts(engine), message_texts(engine)
    config = BackupConfig(
        database_url, str(media), str(tmp_path / "backups"), recipients=[public], part_bytes=64_000
    )
    path, manifest = take_backup(config)
    assert manifest.encrypted and len(manifest.parts) > 3
    assert manifest.contents.database == db_kind and manifest.contents.tables == before
    assert manifest.contents.schema_revision == head_revision() and manifest.contents.media_files == 2
    # The parts are age files: nothing of the content readable without the key.
    raw = b"".join((path.parent / p.name).read_bytes() for p in manifest.parts)
    assert raw.startswith(b"age-encryption.org/v1") and b"beagle" not in raw and b"SQLite format" not in raw

    from core_tools.backup.crypto import load_identities

    lines: list[str] = []
    restore(path.parent, Target.data_dir(tmp_path / "restored"), load_identities(keyfile), say=lines.append)
    copy = make_engine(sqlite_url(tmp_path / "restored" / "assistant.db"))
    assert counts(copy) == before and message_texts(copy) == texts and memory_count(copy) == 4
    assert (tmp_path / "restored" / "media" / sha[:2] / sha).read_bytes() == (
        media / sha[:2] / sha
    ).read_bytes()
    assert "messages: 12 row(s), manifest 12: ok" in lines
    copy.dispose()

    if postgres_or_none is not None:  # and into PostgreSQL, whichever database it came from
        target_url = postgres_or_none.new_database(migrated=False)
        work = tmp_path / "pg-work"
        restore(
            path, Target(target_url, tmp_path / "pg-media", work), load_identities(keyfile), say=lines.append
        )
        pg = make_engine(target_url)
        assert counts(pg) == before and message_texts(pg) == texts and memory_count(pg) == 4
        pg.dispose()
        postgres_or_none.drop_database(target_url)
    engine.dispose()


@pytest.fixture
def postgres_or_none(request: pytest.FixtureRequest) -> TestPostgres | None:
    """The test PostgreSQL server when PostgreSQL is tested, else None."""
    return request.getfixturevalue("postgres") if "postgresql" in selected_databases() else None


@pytest.fixture
def backup(tmp_path: Path, keys: tuple[str, Path]) -> Iterator[tuple[Path, Path]]:
    """An encrypted SQLite backup of a filled database, and a target folder that holds an older database."""
    import asyncio

    url = sqlite_url(tmp_path / "live" / "assistant.db")
    upgrade(url)
    engine = make_engine(url)
    asyncio.run(fill(engine, tmp_path / "live" / "media", OWNER, file_bytes=150_000))
    engine.dispose()
    config = BackupConfig(
        url,
        str(tmp_path / "live" / "media"),
        str(tmp_path / "backups"),
        recipients=[keys[0]],
        part_bytes=50_000,
    )
    path, _ = take_backup(config)
    target = tmp_path / "target"
    old = sqlite_url(target / "assistant.db")
    upgrade(old)
    engine = make_engine(old)
    asyncio.run(fill(engine, target / "media", FRIEND))
    engine.dispose()
    yield path, target


def refused(path: Path, target: Path, keyfile: Path | None, *, force: bool = True, contains: str) -> None:
    """A restore that must be refused with `contains` in its message, the target left as it was."""
    from core_tools.backup.crypto import load_identities

    before = tree_digest(target)
    with pytest.raises(BackupError) as caught:
        restore(
            path,
            Target.data_dir(target),
            load_identities(keyfile) if keyfile else [],
            force=force,
            say=lambda _: None,
        )
    assert contains in str(caught.value), str(caught.value)
    assert tree_digest(target) == before
    assert not [p for p in target.iterdir() if p.name.startswith(".restore-")]  # nothing left behind


def test_faults_are_refused_and_change_nothing(
    backup: tuple[Path, Path], tmp_path: Path, keys: tuple[str, Path]
) -> None:
    path, target = backup
    manifest = read_manifest(path)
    folder = path.parent
    # A wrong identity.
    other = tmp_path / "other.txt"
    other.write_text(new_identity()[0] + "\n")
    refused(path, target, other, contains="cannot decrypt this backup")
    refused(path, target, None, contains="this backup is encrypted: give the age key file")
    # A non-empty target without --force.
    refused(path, target, keys[1], force=False, contains="the target is not empty")
    # A corrupted part (one byte flipped), then a missing one.
    part = folder / manifest.parts[1].name
    good = part.read_bytes()
    part.write_bytes(good[:100] + bytes([good[100] ^ 1]) + good[101:])
    refused(path, target, keys[1], contains=f"part 2 of {len(manifest.parts)} ({part.name}) is corrupted")
    part.unlink()
    refused(path, target, keys[1], contains=f"part 2 of {len(manifest.parts)} ({part.name}) is missing")
    part.write_bytes(good)
    # A manifest that does not match its backup: a table count changed by hand.
    body = json.loads(path.read_text())
    body["tables"]["messages"] += 1
    path.write_text(json.dumps(body))
    refused(
        path, target, keys[1], contains="the manifest does not match the backup it names: the table messages"
    )
    # The same backup with its true manifest restores (with --force), keeping the old database beside it.
    body["tables"]["messages"] -= 1
    path.write_text(json.dumps(body))
    from core_tools.backup.crypto import load_identities

    restore(path, Target.data_dir(target), load_identities(keys[1]), force=True, say=lambda _: None)
    assert any(p.name.startswith("assistant.db.before-restore-") for p in target.iterdir())
    engine = make_engine(sqlite_url(target / "assistant.db"))
    assert message_texts(engine)[0] == f"user 0 of {OWNER}"
    engine.dispose()


def test_a_backup_of_a_newer_schema_is_refused(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "live.db")
    upgrade(url)
    engine = make_engine(url)
    with engine.begin() as conn:  # what a newer version of the bot would have left
        conn.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    engine.dispose()
    path, manifest = take_backup(BackupConfig(url, str(tmp_path / "media"), str(tmp_path / "backups")))
    assert manifest.contents.schema_revision == "0099"
    with pytest.raises(BackupError, match=r"newer schema \(revision 0099\) than this code knows"):
        restore(path, Target.data_dir(tmp_path / "target"), [], say=lambda _: None)
    assert not (tmp_path / "target" / "assistant.db").exists()
    assert not drill(path, [], tmp_path).ok


async def test_an_old_schema_backup_is_restored_and_migrated(
    tmp_path: Path, db_kind: str, postgres_or_none: TestPostgres | None
) -> None:
    # A backup made by an older version: a database migrated only to 0010 (schedules, no media yet).
    url = sqlite_url(tmp_path / "old.db")
    upgrade(url, "0010")
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(
            text("INSERT INTO users (id, created_at, last_seen_at) VALUES (5, '2025-01-01', '2025-01-01')")
        )
        conn.execute(
            text(
                "INSERT INTO sessions (id, user_id, chat_id, name, started_at, last_activity_at) "
                "VALUES ('s1', 5, 5, 'old', '2025-01-01', '2025-01-01')"
            )
        )
        for n in range(3):
            conn.execute(
                text(
                    "INSERT INTO messages (session_id, user_id, chat_id, role, content, status, created_at) "
                    "VALUES ('s1', 5, 5, 'user', :c, 'answered', '2025-01-01')"
                ),
                {"c": f"old message {n}"},
            )
    engine.dispose()
    path, manifest = take_backup(BackupConfig(url, str(tmp_path / "media"), str(tmp_path / "backups")))
    assert manifest.contents.schema_revision == "0010" and "media_files" not in manifest.contents.tables
    lines: list[str] = []
    if db_kind == "sqlite":
        target = Target.data_dir(tmp_path / "restored")
    else:
        assert postgres_or_none is not None
        target = Target(postgres_or_none.new_database(migrated=False), tmp_path / "media2", tmp_path / "work")
    restore(path, target, [], say=lines.append)
    assert f"migrated the backup's database from schema revision 0010 to {head_revision()}" in lines
    assert "messages: 3 row(s), manifest 3: ok" in lines
    assert "media_files: 0 row(s) (a table newer than the backup)" in lines
    restored = make_engine(target.database_url)
    from db.migrate import current_revision

    assert current_revision(restored) == head_revision()
    assert message_texts(restored) == [f"old message {n}" for n in range(3)]
    restored.dispose()


async def test_drill_passes_on_a_good_backup_and_fails_on_a_damaged_one(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "live.db")
    upgrade(url)
    engine = make_engine(url)
    await fill(engine, tmp_path / "media", OWNER)
    engine.dispose()
    path, manifest = take_backup(
        BackupConfig(url, str(tmp_path / "media"), str(tmp_path / "backups"), part_bytes=40_000)
    )
    assert drill(path, [], tmp_path / "work").ok
    assert not list((tmp_path / "work").iterdir())  # the drill's copy is deleted
    last = path.parent / manifest.parts[-1].name
    last.write_bytes(last.read_bytes()[:-10])
    result = drill(path, [], tmp_path / "work")
    assert not result.ok and "incomplete" in result.problem
    assert [m.name for _, m in list_backups(tmp_path / "backups")] == [manifest.name]
    shutil.rmtree(tmp_path / "work")
