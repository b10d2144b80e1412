"""Taking a backup: a consistent snapshot of the database and MEDIA_DIR's files, archived (tar), encrypted
for the recipients when there are any, cut into parts, and listed only once complete. The snapshot (the
database in plaintext) is written into a private scratch folder outside BACKUP_DIR (store.scratch)."""

from __future__ import annotations

import io
import json
import os
import shutil
import sqlite3
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from core_tools.backup.crypto import encrypt_stream
from core_tools.backup.manifest import CONTENTS, DATABASE, MEDIA, BackupError, Contents, Manifest
from core_tools.backup.parts import PartWriter, disk_full
from core_tools.backup.store import (
    clean_old_drills,
    clean_partials,
    locked,
    new_name,
    partial_dir,
    prune,
    scratch,
    scratch_parent,
)
from db.engine import make_engine
from db.snapshot import SnapshotError, revision_of, snapshot, sqlite_url, table_counts

Say = Callable[[str], None]
Checkpoint = Callable[[str], None]  # called with "snapshot", then "archive" (the tests stop a backup there)
TAR_BUFFER = 1 << 20
DEFAULT_PART_BYTES = 45 * 1024 * 1024  # under the Bot API's 50 MB upload limit


@dataclass
class BackupConfig:
    """What a backup needs to know (passed to the worker process as JSON)."""

    database_url: str
    media_dir: str
    backup_dir: str
    keep: int = 7
    recipients: list[str] = field(default_factory=list)
    part_bytes: int = DEFAULT_PART_BYTES

    def to_dict(self) -> dict[str, Any]:
        """The JSON object."""
        return asdict(self)

    @classmethod
    def from_dict(cls, body: dict[str, Any]) -> BackupConfig:
        """From the JSON object."""
        return cls(**body)


def media_files(media_dir: Path) -> Iterator[tuple[Path, str]]:
    """MEDIA_DIR's stored files (not those still being written) with their archive names, in order."""
    if not media_dir.is_dir():
        return
    for root, dirs, files in os.walk(media_dir):
        dirs.sort()
        for name in sorted(files):
            if name.startswith(".part-"):  # a file still being written: its row does not exist yet
                continue
            path = Path(root) / name
            yield path, f"{MEDIA}/{path.relative_to(media_dir).as_posix()}"


def _write_archive(out: IO[bytes], snap: Path, media_dir: Path, contents: Contents) -> None:
    with tarfile.open(fileobj=out, mode="w|", bufsize=TAR_BUFFER, format=tarfile.PAX_FORMAT) as tar:
        tar.add(snap, arcname=DATABASE)
        for path, arcname in media_files(media_dir):
            try:
                info = tar.gettarinfo(path, arcname)
                with path.open("rb") as handle:
                    tar.addfile(info, handle)
            except FileNotFoundError:
                continue  # deleted meanwhile (a user erased their data): its row is gone too
            contents.media_files += 1
            contents.media_bytes += info.size
        # Last: the media counted are those actually archived.
        body = json.dumps(contents.to_dict(), indent=2).encode()
        info = tarfile.TarInfo(CONTENTS)
        info.size, info.mtime, info.mode = len(body), int(time.time()), 0o600
        tar.addfile(info, io.BytesIO(body))


def _full_disk(exc: BaseException, writer: PartWriter | None) -> bool:
    if disk_full(exc) or (writer is not None and disk_full(writer.error)):
        return True
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError | OperationalError) and "disk is full" in text


def _free_mb(folder: Path) -> float:
    try:
        return shutil.disk_usage(folder).free / 1e6
    except OSError:
        return 0.0


def take_backup(
    config: BackupConfig, say: Say = lambda _: None, checkpoint: Checkpoint = lambda _: None
) -> tuple[Path, Manifest]:
    """Write a new backup into BACKUP_DIR, then delete the oldest beyond `keep`; (its path, its manifest)."""
    folder = Path(config.backup_dir)
    private = scratch_parent(config.database_url, config.media_dir, config.backup_dir)
    with locked(folder), scratch(private) as plain:
        left = clean_partials(folder) + clean_old_drills(folder)
        if left:
            say(f"deleted what an unfinished backup left: {', '.join(left)}")
        name = new_name(folder)
        work = partial_dir(folder, name)
        work.mkdir()
        writer: PartWriter | None = None
        try:
            snap = plain / "snapshot.sqlite"
            say("taking a snapshot of the database")
            snapshot(config.database_url, snap, say)
            engine = make_engine(sqlite_url(snap))
            try:
                with engine.connect() as conn:
                    counts, revision = table_counts(conn), revision_of(conn)
            finally:
                engine.dispose()
            checkpoint("snapshot")
            contents = Contents(
                name=name,
                created_at=datetime.now(UTC).isoformat(timespec="seconds"),
                database=make_url(config.database_url).get_backend_name(),
                schema_revision=revision,
                tables=counts,
            )
            prefix = f"{name}.tar" + (".age" if config.recipients else "")
            writer = PartWriter(work, prefix, config.part_bytes)
            media_dir = Path(config.media_dir)
            say("writing the archive" + (" (encrypted)" if config.recipients else ""))
            if config.recipients:
                encrypt_stream(
                    lambda out: _write_archive(out, snap, media_dir, contents), writer, config.recipients
                )
            else:
                _write_archive(writer, snap, media_dir, contents)  # type: ignore[arg-type]  # a raw stream
            writer.close()
            snap.unlink()
            checkpoint("archive")
            manifest = Manifest(contents, bool(config.recipients), list(config.recipients), writer.parts)
            manifest.write(work)
            final = folder / name
            os.rename(work, final)  # the moment it becomes a backup
            _fsync_dir(folder)
        except BaseException as exc:
            shutil.rmtree(work, ignore_errors=True)
            if _full_disk(exc, writer) and writer is None:
                raise BackupError(
                    f"the disk holding {private} is full ({_free_mb(private):.0f} MB free) while the "
                    "database's snapshot is written there: nothing of this backup was kept and the older "
                    "backups are untouched; free space on it"
                ) from None
            if _full_disk(exc, writer):
                raise BackupError(
                    f"the disk holding {folder} is full ({_free_mb(folder):.0f} MB free after deleting this "
                    "unfinished backup): nothing of it was kept and the older backups are untouched; free "
                    "space or set BACKUP_DIR to a larger disk"
                ) from None
            if isinstance(exc, SnapshotError):
                raise BackupError(str(exc)) from None
            raise
        gone = prune(folder, config.keep)
        if gone:
            say(f"deleted {len(gone)} older backup(s) (BACKUP_KEEP={config.keep}): {', '.join(gone)}")
        return final / manifest.file_name(), manifest


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
