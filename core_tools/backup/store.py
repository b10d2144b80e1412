"""BACKUP_DIR: one folder per finished backup, named after it; nothing else there counts as a backup.

A backup is written into a hidden folder (`.NAME.partial`) and renamed to `NAME` only after its last part
and its manifest are on disk: a backup cut short (the process killed, the disk full) is never listed, and
the next run, holding the folder's lock, deletes what it left.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from core_tools.backup.manifest import MANIFEST_SUFFIX, BackupError, Manifest, read_manifest

PARTIAL_SUFFIX = ".partial"
LOCK_NAME = ".lock"
STATE_NAME = ".state.json"


def new_name(folder: Path, now: datetime | None = None) -> str:
    """A name for a new backup: `backup-YYYYMMDD-HHMMSS` (UTC), unique in `folder`."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%d-%H%M%S")
    name, n = f"backup-{stamp}", 1
    while (folder / name).exists() or (folder / f".{name}{PARTIAL_SUFFIX}").exists():
        n += 1
        name = f"backup-{stamp}-{n}"
    return name


def partial_dir(folder: Path, name: str) -> Path:
    """Where a backup is written until it is complete."""
    return folder / f".{name}{PARTIAL_SUFFIX}"


def list_backups(folder: Path) -> list[tuple[Path, Manifest]]:
    """The complete backups in `folder`, oldest first: (their manifest, what it says)."""
    found: list[tuple[Path, Manifest]] = []
    if not folder.is_dir():
        return found
    for child in folder.iterdir():
        if child.name.startswith(".") or not child.is_dir():
            continue
        path = child / f"{child.name}{MANIFEST_SUFFIX}"
        if not path.is_file():
            continue
        try:
            found.append((path, read_manifest(path)))
        except BackupError:
            continue  # not one of ours, or damaged: never counted as a good backup
    found.sort(key=lambda item: (item[1].contents.created_at, item[1].name))
    return found


def latest(folder: Path) -> Path | None:
    """The manifest of the newest complete backup, if any."""
    backups = list_backups(folder)
    return backups[-1][0] if backups else None


def prune(folder: Path, keep: int) -> list[str]:
    """Delete the oldest complete backups beyond `keep`; their names."""
    backups = list_backups(folder)
    gone = backups[: max(0, len(backups) - keep)]
    for path, _ in gone:
        shutil.rmtree(path.parent, ignore_errors=True)
    return [m.name for _, m in gone]


def clean_partials(folder: Path) -> list[str]:
    """Delete what unfinished backups left (call with the lock held); their names."""
    gone = []
    if folder.is_dir():
        for child in folder.iterdir():
            if child.name.startswith(".") and child.name.endswith(PARTIAL_SUFFIX) and child.is_dir():
                shutil.rmtree(child, ignore_errors=True)
                gone.append(child.name[1 : -len(PARTIAL_SUFFIX)])
    return gone


@contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold BACKUP_DIR's lock: one backup at a time (the lock dies with its process)."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BackupError(f"another backup is being written into {folder}") from None
        yield
    finally:
        os.close(fd)
