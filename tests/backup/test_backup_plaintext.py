"""No plaintext copy of the database ever lies in BACKUP_DIR (issue 31, item 4): not while an encrypted backup
is taken, not while the drill unpacks it, and not after either is killed midway (a real process, killed by
SIGKILL at a checkpoint of the backup's own code); what a killed run left elsewhere (its private scratch
folder) and what earlier versions left in BACKUP_DIR are deleted by the next run."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from telegram import Bot

from bot.adapter.outbox import TelegramOutbox
from bot.runtime.backup_jobs import BackupJobs
from core_tools.backup.crypto import identity_from, new_identity
from core_tools.backup.restore import drill
from core_tools.backup.store import SCRATCH_PREFIX, clean_scratch, list_backups, scratch_parent
from core_tools.backup.take import BackupConfig, take_backup
from db.engine import make_engine
from db.migrate import upgrade
from db.snapshot import sqlite_url
from tests.backup.helpers import fill
from tests.support.fakes.openai_api import FakeLLM
from tests.support.harness import OWNER, make_settings

REPO = Path(__file__).resolve().parents[2]
SQLITE_MAGIC = b"SQLite format 3\x00"

# Runs a backup or a drill and kills itself (SIGKILL: no cleanup of any kind runs) at the named checkpoint.
KILLED_AT = """
import json, os, signal, sys
from pathlib import Path

def stop(where):
    if where == sys.argv[1]:
        os.kill(os.getpid(), signal.SIGKILL)

job = json.loads(sys.stdin.read())
if job["action"] == "take":
    from core_tools.backup.take import BackupConfig, take_backup
    take_backup(BackupConfig.from_dict(job["config"]), checkpoint=stop)
else:
    from core_tools.backup.crypto import identity_from
    from core_tools.backup.restore import drill
    keys = [identity_from(s) for s in job["identities"]]
    drill(Path(job["manifest"]), keys, Path(job["work"]), checkpoint=stop)
"""


def plaintext_databases(folder: Path) -> list[str]:
    """Every file under `folder` (hidden ones too) that is an unencrypted SQLite database."""
    found = []
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            with path.open("rb") as handle:
                if handle.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC:
                    found.append(str(path.relative_to(folder)))
    return found


def scratch_folders(parent: Path) -> list[Path]:
    """The private scratch folders in `parent`."""
    return sorted(parent.glob(f"{SCRATCH_PREFIX}*"))


def killed_at(where: str, job: Mapping[str, object]) -> None:
    """Run KILLED_AT in a real process and check that it was killed there."""
    done = subprocess.run(
        [sys.executable, "-c", KILLED_AT, where],
        input=json.dumps(job).encode(),
        capture_output=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]


@pytest.fixture
def live(tmp_path: Path) -> tuple[BackupConfig, str]:
    """A filled SQLite database in DATA_DIR with BACKUP_DIR inside it (the defaults' layout), and the
    config of an encrypted backup of it; with the secret key of its recipient."""
    import asyncio

    data = tmp_path / "data"
    url = sqlite_url(data / "assistant.db")
    upgrade(url)
    engine = make_engine(url)
    asyncio.run(fill(engine, data / "media", OWNER, file_bytes=50_000))
    engine.dispose()
    secret, public = new_identity()
    config = BackupConfig(
        url, str(data / "media"), str(data / "backups"), recipients=[public], part_bytes=20_000
    )
    return config, secret


@pytest.fixture
def system_temp() -> Iterator[Path]:
    """The system's temporary folder; the scratch folders a test's killed run left there are deleted."""
    folder = Path(tempfile.gettempdir()).resolve()
    yield folder
    clean_scratch(folder)  # only those no running backup or drill holds


def test_an_encrypted_backup_writes_no_plaintext_database_into_backup_dir(
    live: tuple[BackupConfig, str],
) -> None:
    config, _ = live
    backups, data = Path(config.backup_dir), Path(config.database_url.removeprefix("sqlite:///")).parent
    seen: dict[str, list[str]] = {}
    private: list[Path] = []

    def look(where: str) -> None:
        seen[where] = plaintext_databases(backups)
        private.extend(scratch_folders(data))

    path, manifest = take_backup(config, checkpoint=look)
    assert manifest.encrypted and len(manifest.parts) > 2
    assert seen == {"snapshot": [], "archive": []}  # while it ran
    assert plaintext_databases(backups) == []  # and after
    # The snapshot was written, private, outside BACKUP_DIR, and is gone.
    assert private and all(stat.S_IMODE(os.stat(p).st_mode) == 0o700 for p in set(private) if p.exists())
    assert not (set(private) & {p for p in backups.rglob("*")})
    assert scratch_folders(data) == []
    assert [p for p, _ in list_backups(backups)] == [path]


@pytest.mark.slow  # a real process killed, then a new run
def test_a_backup_killed_after_its_snapshot_leaves_no_plaintext_in_backup_dir(
    live: tuple[BackupConfig, str],
) -> None:
    config, _ = live
    backups, data = Path(config.backup_dir), Path(config.database_url.removeprefix("sqlite:///")).parent
    first, _ = take_backup(config)
    killed_at("snapshot", {"action": "take", "config": config.to_dict()})
    assert plaintext_databases(backups) == []
    assert [p for p, _ in list_backups(backups)] == [first]  # the killed one is not listed
    # Its plaintext snapshot is in a private folder outside BACKUP_DIR, until the next run deletes it.
    (left,) = scratch_folders(data)
    assert stat.S_IMODE(left.stat().st_mode) == 0o700
    assert plaintext_databases(left) == ["snapshot.sqlite"]
    lines: list[str] = []
    take_backup(config, lines.append)
    assert scratch_folders(data) == [] and not list(backups.glob(".*.partial"))
    assert any(line.startswith("deleted what an unfinished backup left") for line in lines)
    assert len(list_backups(backups)) == 2 and plaintext_databases(backups) == []


def test_what_earlier_versions_left_in_backup_dir_is_deleted_at_the_next_backup(
    live: tuple[BackupConfig, str],
) -> None:
    config, _ = live
    backups, live_db = Path(config.backup_dir), Path(config.database_url.removeprefix("sqlite:///"))
    for left in (".backup-20260101-000000.partial/snapshot.sqlite", ".drill-x1y2z3/database.sqlite"):
        (backups / left).parent.mkdir(parents=True)
        shutil.copyfile(live_db, backups / left)
    assert len(plaintext_databases(backups)) == 2
    take_backup(config)
    assert plaintext_databases(backups) == []
    assert not list(backups.glob(".*.partial")) and not list(backups.glob(".drill-*"))


@pytest.mark.slow  # a real process killed, then a new run
def test_a_drill_killed_midway_leaves_no_plaintext_in_backup_dir(
    live: tuple[BackupConfig, str], system_temp: Path
) -> None:
    config, secret = live
    backups, data = Path(config.backup_dir), Path(config.database_url.removeprefix("sqlite:///")).parent
    path, _ = take_backup(config)
    work = scratch_parent(config.database_url, config.media_dir, config.backup_dir)
    assert work == data.resolve()  # beside the database, outside BACKUP_DIR
    job = {"action": "drill", "manifest": str(path), "identities": [secret], "work": str(work)}
    killed_at("unpacked", job)
    assert plaintext_databases(backups) == []
    (left,) = scratch_folders(data)  # the unpacked copy, private, until the next drill
    assert plaintext_databases(left) == ["database.sqlite"]
    assert drill(path, [identity_from(secret)], work).ok
    assert scratch_folders(data) == []
    # A drill given BACKUP_DIR itself as its work folder (what the bot passed before) unpacks elsewhere.
    killed_at("unpacked", {**job, "work": str(backups)})
    assert plaintext_databases(backups) == []
    assert [p.name for p in backups.iterdir() if p.name.startswith(".")] == [".lock"]
    assert any(plaintext_databases(p) for p in scratch_folders(system_temp))  # it went there


@pytest.mark.slow  # the drill's worker process
async def test_the_bots_drill_unpacks_outside_backup_dir_and_deletes_old_leftovers(
    live: tuple[BackupConfig, str], tmp_path: Path
) -> None:
    config, secret = live
    backups, live_db = Path(config.backup_dir), Path(config.database_url.removeprefix("sqlite:///"))
    path, _ = take_backup(config)
    (backups / ".drill-a1b2c3").mkdir()  # an interrupted drill of an earlier version
    shutil.copyfile(live_db, backups / ".drill-a1b2c3" / "database.sqlite")

    class Services:  # what BackupJobs reads of the services
        settings = make_settings(
            tmp_path,
            None,
            FakeLLM(),
            database_url=config.database_url,
            media_dir=config.media_dir,
            backup_dir=config.backup_dir,
        )

    bot = Bot("1:x", base_url="http://127.0.0.1:9/bot")  # a good drill tells nobody
    jobs = BackupJobs(Services(), TelegramOutbox(bot, None))  # type: ignore[arg-type]
    assert await jobs.drill(path, [secret]) is True
    assert plaintext_databases(backups) == []
    assert not list(backups.glob(".drill-*")) and scratch_folders(live_db.parent) == []


async def test_the_bots_first_backup_check_deletes_what_killed_runs_left(
    live: tuple[BackupConfig, str], tmp_path: Path
) -> None:
    config, _ = live
    backups, live_db = Path(config.backup_dir), Path(config.database_url.removeprefix("sqlite:///"))
    private = scratch_parent(config.database_url, config.media_dir, config.backup_dir)
    left = [
        backups / ".backup-20260101-000000.partial" / "backup-20260101-000000.tar.age.000",
        backups / ".drill-q1w2e3" / "database.sqlite",  # an earlier version's drill
        private / f"{SCRATCH_PREFIX}killed" / "snapshot.sqlite",  # a killed backup's snapshot
    ]
    for path in left:
        path.parent.mkdir(parents=True)
        shutil.copyfile(live_db, path)
    held = private / f"{SCRATCH_PREFIX}running"  # a backup or drill that runs: kept
    held.mkdir()
    fd = os.open(held, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)

    class Services:  # what BackupJobs reads of the services
        settings = make_settings(
            tmp_path,
            None,
            FakeLLM(),
            database_url=config.database_url,
            media_dir=config.media_dir,
            backup_dir=config.backup_dir,
        )

    bot = Bot("1:x", base_url="http://127.0.0.1:9/bot")  # nothing is due: nobody is told
    jobs = BackupJobs(Services(), TelegramOutbox(bot, None))  # type: ignore[arg-type]
    try:
        await jobs.tick()  # no backup is due
        assert not any(path.parent.exists() for path in left)
        assert held.is_dir() and plaintext_databases(backups) == []
    finally:
        os.close(fd)
