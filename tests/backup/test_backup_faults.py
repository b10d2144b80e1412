"""Faults of real processes and real disks: a full disk while writing, the backup process killed midway, a
restore over a running bot. Each gets one clear message; no half backup is ever listed; nothing existing is
overwritten."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from core_tools.backup.manifest import BackupError
from core_tools.backup.parts import verify_parts
from core_tools.backup.restore import Target, restore
from core_tools.backup.store import list_backups
from core_tools.backup.take import BackupConfig, take_backup
from db.engine import make_engine
from db.migrate import upgrade
from db.snapshot import sqlite_url
from tests.backup.helpers import fill, message_texts, store_file
from tests.backup.test_backup_restore import tree_digest
from tests.support.fakes.openai_api import FakeLLM, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, running_bot

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 3 MB file system (tmpfs; needs root, as the suite's sandbox tests do)."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


async def test_a_full_disk_keeps_no_half_backup_and_the_older_ones(tmp_path: Path, small_disk: Path) -> None:
    url = sqlite_url(tmp_path / "live.db")
    upgrade(url)
    engine = make_engine(url)
    await fill(engine, tmp_path / "media", OWNER, file_bytes=1000)
    engine.dispose()
    config = BackupConfig(url, str(tmp_path / "media"), str(small_disk), part_bytes=200_000)
    first, _ = take_backup(config)
    kept = tree_digest(small_disk)
    for _ in range(3):  # 3 MB more of media than the disk holds
        store_file(tmp_path / "media", os.urandom(1_000_000))
    with pytest.raises(
        BackupError,
        match=r"the disk holding .* is full .* nothing of it was kept and the older backups are untouched",
    ):
        take_backup(config)
    assert [p for p, _ in list_backups(small_disk)] == [first]
    assert tree_digest(small_disk) == kept  # no partial folder left, the first backup as it was
    verify_parts(first.parent, list_backups(small_disk)[0][1].parts)


async def test_a_backup_process_killed_midway_is_never_listed(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "live.db")
    upgrade(url)
    engine = make_engine(url)
    await fill(engine, tmp_path / "media", OWNER)
    engine.dispose()
    for _ in range(40):
        store_file(tmp_path / "media", os.urandom(1_000_000))
    backups = tmp_path / "backups"
    config = BackupConfig(url, str(tmp_path / "media"), str(backups), part_bytes=500_000)
    take_backup(config)  # one good backup before
    proc = subprocess.Popen(
        [sys.executable, "-m", "core_tools.backup", "take"],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps({"config": config.to_dict()}).encode())
    proc.stdin.close()

    def partial_parts() -> list[Path]:
        return [p for d in backups.glob(".*.partial") for p in d.glob("*.tar.*")]

    loop = asyncio.get_running_loop()
    deadline = loop.time() + 120
    while len(partial_parts()) < 3 and proc.poll() is None:  # well into writing its parts
        assert loop.time() < deadline, "the backup process wrote no parts"
        await asyncio.sleep(0.01)
    assert proc.poll() is None, "the backup finished before it could be killed: give it more media"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(list_backups(backups)) == 1  # the half backup is not listed
    assert list(backups.glob(".*.partial"))  # what it left is there, unlisted
    lines: list[str] = []
    take_backup(config, lines.append)  # the next run cleans it and succeeds
    assert any(line.startswith("deleted what an unfinished backup left") for line in lines)
    assert not list(backups.glob(".*.partial")) and len(list_backups(backups)) == 2


async def test_a_restore_over_a_running_bot_is_refused(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("hello"))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "hi")
        await h.final_text(OWNER, "hello")
        settings = h.settings
        config = BackupConfig(settings.database_url, settings.media_dir, str(tmp_path / "backups"))
        path, _ = await asyncio.to_thread(take_backup, config)  # taken while the bot runs
        target = Target(settings.database_url, Path(settings.media_dir), tmp_path / "work")
        with pytest.raises(BackupError, match=r"a bot is running on .* stop it, then restore"):
            await asyncio.to_thread(restore, path, target, [], force=True, lease_s=settings.replica_lease_s)
        engine = make_engine(settings.database_url)
        assert message_texts(engine) == ["hi", "hello"]
        engine.dispose()
    # Stopped, the same restore goes through (the bot's clean stop removed its heartbeat).
    await asyncio.to_thread(
        restore, path, target, [], force=True, lease_s=settings.replica_lease_s, say=lambda _: None
    )
