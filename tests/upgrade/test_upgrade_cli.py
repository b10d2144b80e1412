"""`python -m bot upgrade` and `python -m bot rollback` as processes, on a database the previous release's
migrations made, with real rows (turns, memories with vectors, schedules, media), on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core_tools.backup.crypto import new_identity
from db.migrate import head_revision
from tests.support.databases import sqlite_only
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER
from tests.support.processes import run_bot
from tests.upgrade.helpers import (
    LOSES_MEMORIES,
    PREVIOUS,
    backups_in,
    checkout_with_failing_migration,
    make_old_database,
    trial_databases,
    upgrade_env,
)

pytestmark = pytest.mark.slow  # `python -m bot` processes that back up, migrate and self-test a database


async def test_upgrade_keeps_every_row_and_rollback_brings_the_old_revision_back(
    db_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db = await make_old_database(db_kind, tmp_path, request)
    before, texts = db.counts(), db.texts()
    assert before["memories"] == 4 and before["schedules"] == 2 and before["media_files"] == 2
    env = upgrade_env(tmp_path, db)

    code, out, err = await run_bot(tmp_path, "upgrade", env=env, timeout=240)
    assert code == 0, out + err
    head = head_revision()
    assert db.revision() == head
    after = db.counts()
    assert after.pop("upgrades") == 1
    # Every row is still there (none from the self-test); the tables this release adds are empty.
    added = {table: after.pop(table) for table in set(after) - set(before)}
    assert after == before and db.texts() == texts
    assert set(added.values()) <= {0}, added
    assert f"upgrading the database from schema revision {PREVIOUS} to {head}" in out
    for probe in ("turn", "recall", "schedules", "toolkit"):
        assert f"ok   {probe}: " in out, out
    assert "recalled by its own words" in out and "the next firings of 2 live schedule(s)" in out
    [manifest] = backups_in(db.backups)  # the backup first, of the old schema
    assert json.loads(manifest.read_text())["schema_revision"] == PREVIOUS
    assert f"restores backup {manifest.parent.name}" in out

    code, out, err = await run_bot(tmp_path, "doctor", "--quick", env=env)
    assert code == 0, out + err
    [version] = [line for line in out.splitlines() if " version: " in line]
    assert version.startswith("ok   version: Version 0.") and ", upgraded 20" in version
    assert f"(schema {PREVIOUS} -> {head}, backup {manifest.parent.name})" in version

    code, out, err = await run_bot(tmp_path, "upgrade", env=env)
    assert code == 0 and "nothing to upgrade" in out, out + err
    assert len(list(backups_in(db.backups))) == 1  # a database at head is left alone: no backup

    code, out, err = await run_bot(tmp_path, "rollback", env=env, timeout=240)
    assert code == 0, out + err
    assert db.revision() == PREVIOUS and db.counts() == before and db.texts() == texts
    assert f"at schema revision {PREVIOUS} again" in out and "It belongs to the code before 0." in out

    code, out, err = await run_bot(tmp_path, "rollback", env=env)
    assert code == 1 and "no record of an upgrade" in err and "Nothing was changed" in err
    assert db.revision() == PREVIOUS


async def test_a_failing_migration_leaves_the_live_database_untouched_and_tells_the_owner(
    db_kind: str, tmp_path: Path, request: pytest.FixtureRequest, tg: FakeTelegram
) -> None:
    db = await make_old_database(db_kind, tmp_path, request)
    before, texts = db.counts(), db.texts()
    digest = db.digest() if db_kind == "sqlite" else None
    head = head_revision()
    assert head is not None
    code_dir = checkout_with_failing_migration(tmp_path / "release", head)
    env = upgrade_env(tmp_path, db, tg, PYTHONPATH=str(code_dir))

    code, out, err = await run_bot(code_dir, "upgrade", env=env, timeout=240)
    assert code == 1, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    line = lines[0]
    assert line == (
        "Upgrade failed while migrating the copy: RuntimeError: this test migration fails on purpose; "
        f"the live database is unchanged (schema revision {PREVIOUS})."
    )
    assert "Traceback" not in out + err
    if digest is not None:
        assert db.digest() == digest  # byte-identical
    assert db.revision() == PREVIOUS and db.counts() == before and db.texts() == texts
    if db_kind == "postgresql":
        assert trial_databases(request.getfixturevalue("postgres").admin_uri) == []
    told = await tg.wait_for(lambda: [t for t in tg.sent_texts(OWNER) if "Upgrade failed" in t], 60)
    assert told == [line]

    # The bot of that release, started on this database: the same checked upgrade, one line, the owner told.
    code, out, err = await run_bot(code_dir, env=env, timeout=240)
    assert code != 0
    assert err.strip().splitlines()[-1] == line, err
    if digest is not None:
        assert db.digest() == digest
    assert db.revision() == PREVIOUS and db.counts() == before
    await tg.wait_for(lambda: len([t for t in tg.sent_texts(OWNER) if "Upgrade failed" in t]) == 2, 60)
    assert tg.sent_texts(OWNER)[-1] == f"The bot did not start: {line}"


async def test_a_migration_that_loses_data_fails_the_self_test_and_changes_nothing(
    db_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db = await make_old_database(db_kind, tmp_path, request)
    before = db.counts()
    digest = db.digest() if db_kind == "sqlite" else None
    head = head_revision()
    assert head is not None
    code_dir = checkout_with_failing_migration(tmp_path / "release", head, LOSES_MEMORIES)
    env = upgrade_env(tmp_path, db, PYTHONPATH=str(code_dir))

    code, out, err = await run_bot(code_dir, "upgrade", env=env, timeout=240)
    assert code == 1, out + err
    assert "FAIL recall: the memory " in out and "ok   schedules: " in out
    [line] = err.strip().splitlines()
    assert line.startswith("Upgrade failed while self-testing the copy: recall: the memory ")
    assert line.endswith(
        f"was not recalled by its own words; the live database is unchanged (schema revision {PREVIOUS})."
    )
    if digest is not None:
        assert db.digest() == digest
    assert db.revision() == PREVIOUS and db.counts() == before


@sqlite_only
async def test_the_upgrades_backup_is_encrypted_when_backups_are(
    db_kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    db = await make_old_database(db_kind, tmp_path, request)
    before = db.counts()
    secret, public = new_identity()
    keyfile = tmp_path / "key.txt"  # kept off the bot's machine in real life
    keyfile.write_text(f"# public key: {public}\n{secret}\n")
    env = upgrade_env(tmp_path, db, BACKUP_AGE_RECIPIENTS=public)

    code, out, err = await run_bot(tmp_path, "upgrade", env=env, timeout=240)
    assert code == 0, out + err
    [manifest] = backups_in(db.backups)
    body = json.loads(manifest.read_text())
    assert body["encrypted"] is True and body["recipients"] == [public]
    assert all(".tar.age" in p["name"] for p in body["parts"])

    code, out, err = await run_bot(tmp_path, "rollback", env=env)
    assert code == 1 and "this backup is encrypted: give the age key file with --identity KEYFILE" in err
    assert db.revision() == head_revision()
    code, out, err = await run_bot(tmp_path, "rollback", "--identity", str(keyfile), env=env, timeout=240)
    assert code == 0, out + err
    assert db.revision() == PREVIOUS and db.counts() == before
