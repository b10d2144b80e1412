"""BACKUP_DIR: one folder per finished backup, named after it; nothing else there counts as a backup.

A backup is written into a hidden folder (`.NAME.partial`) and renamed to `NAME` only after its last part
and its manifest are on disk: a backup cut short (the process killed, the disk full) is never listed, and
the next run, holding the folder's lock, deletes what it left.

No plaintext copy of the database ever lies in BACKUP_DIR: a backup's snapshot and a drill's unpacked copy
are written into a private scratch folder (mode 0700, `.backup-scratch-*`) outside it, beside the database
itself (scratch_parent), locked while in use and deleted after; one a killed run left is deleted by the next
backup or drill.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy.engine import make_url

from core_tools.backup.manifest import MANIFEST_SUFFIX, BackupError, Manifest, read_manifest

PARTIAL_SUFFIX = ".partial"
LOCK_NAME = ".lock"
STATE_NAME = ".state.json"
SCRATCH_PREFIX = ".backup-scratch-"
OLD_DRILL_PREFIX = ".drill-"  # where drills unpacked inside BACKUP_DIR before (never cleaned then)


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


def clean_old_drills(folder: Path) -> list[str]:
    """Delete the unpacked copies interrupted drills of earlier versions left in BACKUP_DIR; their names."""
    gone = []
    if folder.is_dir():
        for child in folder.iterdir():
            if child.name.startswith(OLD_DRILL_PREFIX) and child.is_dir() and not child.is_symlink():
                shutil.rmtree(child, ignore_errors=True)
                gone.append(child.name)
    return gone


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def scratch_parent(database_url: str, media_dir: str, backup_dir: str) -> Path:
    """Where a backup's or a drill's plaintext is written for a while: beside the SQLite database (what it
    copies already lies there), else beside MEDIA_DIR; never inside BACKUP_DIR (then the system's temporary
    folder)."""
    url = make_url(database_url)
    if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:":
        parent = Path(url.database).expanduser().resolve().parent
    else:
        parent = Path(media_dir).expanduser().resolve().parent
    return outside(parent, Path(backup_dir))


def outside(parent: Path, backup_dir: Path) -> Path:
    """`parent`, or the system's temporary folder when `parent` lies inside `backup_dir`."""
    backups = backup_dir.expanduser().resolve()
    parent = parent.expanduser().resolve()
    if _inside(parent, backups):
        parent = Path(tempfile.gettempdir()).resolve()
        if _inside(parent, backups):
            raise BackupError(
                f"BACKUP_DIR ({backups}) holds the data folder and the temporary folder: set BACKUP_DIR to a "
                "folder of its own, so that no plaintext copy of the database is ever written into it"
            )
    return parent


def _open_dir(path: Path) -> int | None:
    try:
        return os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return None  # gone meanwhile, or another user's


def clean_scratch(parent: Path) -> list[str]:
    """Delete the scratch folders in `parent` that no running backup or drill holds; their names."""
    gone: list[str] = []
    if not parent.is_dir():
        return gone
    for child in sorted(parent.glob(f"{SCRATCH_PREFIX}*")):
        fd = _open_dir(child)
        if fd is None:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # in use
            shutil.rmtree(child, ignore_errors=True)
            gone.append(child.name)
        finally:
            os.close(fd)
    return gone


@contextmanager
def scratch(parent: Path) -> Iterator[Path]:
    """A new private folder (mode 0700) in `parent`, locked while in use and deleted after; what killed
    runs left in `parent` is deleted first."""
    parent.mkdir(parents=True, exist_ok=True)
    clean_scratch(parent)
    while True:
        path = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX, dir=parent))  # mode 0700
        fd = _open_dir(path)
        if fd is None:
            continue
        fcntl.flock(fd, fcntl.LOCK_EX)  # a cleaner that took it first holds it only while deleting it
        try:
            if os.stat(path).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)  # deleted by a cleaner before it was locked: another one
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        os.close(fd)


def clean_leftovers(folder: Path, private: Path) -> list[str]:
    """What killed backups and drills left, in BACKUP_DIR and in the scratch folder's parent `private`;
    their names. A partial backup is left while another backup holds BACKUP_DIR's lock (that one's own)."""
    gone = clean_scratch(private) + clean_old_drills(folder)
    if folder.is_dir():
        try:
            with locked(folder):
                gone += clean_partials(folder)
        except BackupError:
            pass  # a backup is being written: it cleans what others left before it starts
    return gone
