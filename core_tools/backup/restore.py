"""Restoring a backup, and the restore drill (a restore into a temporary folder, compared, then deleted).

Everything is checked before anything is touched: the manifest, every part's size and SHA-256, the schema
revision (one newer than this code is refused), the decryption, the archive, the database's schema (exactly
the migrations', core_tools/backup/schema.py), and each table's rows against the manifest. A refused
restore changes nothing: the target is only read, read-only. The backup is unpacked and migrated beside the
target; only then is it moved into place (a SQLite file and MEDIA_DIR renamed, or one PostgreSQL
transaction), and what it replaces (with --force) is kept beside it under a `.before-restore-TIME` name.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

from alembic.script import ScriptDirectory
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from core_tools.backup.crypto import Identity, decrypt_stream
from core_tools.backup.manifest import (
    CONTENTS,
    DATABASE,
    MANIFEST_SUFFIX,
    MEDIA,
    BackupError,
    Contents,
    Manifest,
    contents_from,
    read_manifest,
)
from core_tools.backup.parts import PartReader, disk_full, verify_parts
from core_tools.backup.schema import check_schema, open_read_only
from core_tools.backup.store import list_backups, outside, scratch
from db.engine import make_engine, sqlite_module
from db.migrate import alembic_config, downgrade, head_revision, upgrade
from db.snapshot import (
    SnapshotError,
    is_empty,
    live_processes,
    load_snapshot,
    revision_of,
    sqlite_url,
    table_counts,
)

Say = Callable[[str], None]
Checkpoint = Callable[[str], None]  # the drill calls it with "unpacked" (the tests stop a drill there)
HASH_CHUNK = 1 << 20


def find_manifest(path: Path) -> Path:
    """The manifest a restore reads: the file given, the one manifest in the folder given, or (a BACKUP_DIR)
    the newest complete backup's."""
    if path.is_file():
        if path.name.endswith(MANIFEST_SUFFIX):
            return path
        raise BackupError(
            f"{path} is not a backup manifest (*{MANIFEST_SUFFIX}); give the manifest or its folder"
        )
    if not path.is_dir():
        raise BackupError(f"there is no backup at {path}")
    manifests = sorted(path.glob(f"*{MANIFEST_SUFFIX}"))
    if len(manifests) == 1:
        return manifests[0]
    if len(manifests) > 1:
        newest = max(manifests, key=lambda m: read_manifest(m).contents.created_at)
        return newest
    backups = list_backups(path)
    if not backups:
        raise BackupError(f"there is no backup manifest (*{MANIFEST_SUFFIX}) in {path}")
    return backups[-1][0]


def check_revision(revision: str | None) -> None:
    """Refuse a backup of a schema this code does not know (made by a newer version of the bot)."""
    if revision is None:
        return
    scripts = ScriptDirectory.from_config(alembic_config(""))
    known = {rev.revision for rev in scripts.walk_revisions()}
    if revision not in known:
        raise BackupError(
            f"this backup is of a newer schema (revision {revision}) than this code knows (newest "
            f"{head_revision()}): restore it with the version of the bot that made it, or a newer one"
        )


@dataclass
class Unpacked:
    """A backup checked and unpacked into a folder."""

    manifest: Manifest
    database: Path
    media: Path
    counts: dict[str, int]
    lines: list[str] = field(default_factory=list)


def _extract(stream: IO[bytes], into: Path) -> None:
    try:
        with tarfile.open(fileobj=stream, mode="r|") as tar:
            tar.extractall(into, filter="data")
    except tarfile.TarError as exc:
        raise BackupError(f"the archive inside the backup is damaged ({exc})") from None


def _mismatch(manifest: Contents, inside: Contents) -> str | None:
    for what in ("name", "created_at", "database", "schema_revision", "media_files", "media_bytes"):
        if getattr(manifest, what) != getattr(inside, what):
            said, found = getattr(manifest, what), getattr(inside, what)
            return f"{what} is {said!r} in the manifest, {found!r} in the archive"
    for table in sorted(set(manifest.tables) | set(inside.tables)):
        a, b = manifest.tables.get(table), inside.tables.get(table)
        if a != b:
            return f"the table {table} has {a} rows in the manifest, {b} in the archive"
    return None


def _check_media(media: Path, contents: Contents) -> None:
    files, size = 0, 0
    if media.is_dir():
        for root, _, names in os.walk(media):
            for name in names:
                path = Path(root) / name
                files += 1
                size += path.stat().st_size
                if len(name) == 64 and "." not in name:  # a file stored under its SHA-256
                    digest = hashlib.sha256()
                    with path.open("rb") as handle:
                        while chunk := handle.read(HASH_CHUNK):
                            digest.update(chunk)
                    if digest.hexdigest() != name:
                        raise BackupError(f"the media file {name} in the backup is corrupted")
    if (files, size) != (contents.media_files, contents.media_bytes):
        raise BackupError(
            f"the backup holds {files} media files ({size} bytes), its manifest says {contents.media_files} "
            f"({contents.media_bytes} bytes)"
        )


def unpack(manifest_path: Path, identities: Sequence[Identity], into: Path) -> Unpacked:
    """Check a backup and unpack it into the empty folder `into`; BackupError on the first problem."""
    manifest = read_manifest(manifest_path)
    check_revision(manifest.contents.schema_revision)
    if manifest.encrypted and not identities:
        raise BackupError("this backup is encrypted: give the age key file with --identity KEYFILE")
    paths = verify_parts(manifest_path.parent, manifest.parts)
    reader = PartReader(paths)
    try:
        if manifest.encrypted:
            decrypt_stream(reader, lambda stream: _extract(stream, into), identities)
        else:
            _extract(io.BufferedReader(reader, HASH_CHUNK), into)
    except OSError as exc:
        if disk_full(exc):
            raise BackupError(f"the disk holding {into.parent} is full; nothing was restored") from None
        raise
    finally:
        reader.close()
    try:
        inside = contents_from(
            json.loads((into / CONTENTS).read_text(encoding="utf-8")), "the archive's contents"
        )
    except (OSError, ValueError, RecursionError):
        raise BackupError(
            "the archive inside the backup has no list of its contents: it is damaged"
        ) from None
    problem = _mismatch(manifest.contents, inside)
    if problem:
        raise BackupError(f"the manifest does not match the backup it names: {problem}")
    database = into / DATABASE
    if not database.is_file():
        raise BackupError("the archive inside the backup holds no database")
    check_revision(inside.schema_revision)
    check_schema(database, inside.schema_revision)
    engine = make_engine(sqlite_url(database))
    try:
        with engine.connect() as conn:
            problem_rows = conn.exec_driver_sql("PRAGMA integrity_check").scalar()
            counts = table_counts(conn) if problem_rows == "ok" else {}
    except DBAPIError as exc:
        raise BackupError(f"the database in the backup cannot be read ({exc.orig})") from None
    finally:
        engine.dispose()
    if problem_rows != "ok":
        raise BackupError(f"the database in the backup is damaged ({problem_rows})")
    for table, expected in inside.tables.items():
        if counts.get(table) != expected:
            raise BackupError(
                f"the table {table} holds {counts.get(table)} rows in the backup's database, its "
                f"manifest says {expected}"
            )
    _check_media(into / MEDIA, inside)
    lines = [f"{t}: {n} row(s), as the manifest says" for t, n in counts.items()]
    return Unpacked(manifest, database, into / MEDIA, counts, lines)


def migrate_copy(unpacked: Unpacked, say: Say) -> None:
    """Bring the unpacked database to this code's schema (the migrations an older backup needs)."""
    url = sqlite_url(unpacked.database)
    before = unpacked.manifest.contents.schema_revision
    head = head_revision()
    if before != head:
        upgrade(url)
        say(f"migrated the backup's database from schema revision {before} to {head}")


@dataclass
class Target:
    """Where a restore goes: a database and a media folder; `work` is where the backup is unpacked first
    (on the same disk as a SQLite target, so that moving it into place is a rename)."""

    database_url: str
    media_dir: Path
    work: Path

    @classmethod
    def data_dir(cls, folder: Path) -> Target:
        """`--to DATA_DIR`: DATA_DIR/assistant.db and DATA_DIR/media."""
        return cls(sqlite_url(folder / "assistant.db"), folder / "media", folder)

    def sqlite_file(self) -> Path | None:
        """The SQLite file, for a SQLite target."""
        url = make_url(self.database_url)
        return Path(url.database) if url.get_backend_name() == "sqlite" and url.database else None

    def describe(self) -> str:
        """The target without a password."""
        return make_url(self.database_url).render_as_string(hide_password=True)


def _media_in_use(media: Path) -> bool:
    return media.is_dir() and any(p.is_file() for p in media.rglob("*"))


def _read_only_engine(path: Path) -> Engine:
    """An engine on a SQLite file that leaves it exactly as it is: read-only, and without a -wal or -shm
    left behind (a read-only connection cannot delete those it creates, so it is opened immutable unless a
    -wal is there already, as beside a bot that runs or did not stop cleanly)."""
    query = "mode=ro" if Path(f"{path}-wal").exists() else "immutable=1"
    return create_engine("sqlite://", module=sqlite_module(), creator=lambda: open_read_only(path, query))


def check_target(target: Target, lease_s: float, force: bool) -> bool:
    """Refuse a target a bot runs on, and a non-empty one without `force`; whether it holds anything. The
    target is only read (a SQLite file read-only): a refusal changes nothing."""
    sqlite_file = target.sqlite_file()
    holds = False
    if sqlite_file is None or sqlite_file.exists():
        engine = make_engine(target.database_url) if sqlite_file is None else _read_only_engine(sqlite_file)
        try:
            with engine.connect() as conn:
                running = live_processes(conn, lease_s)
                holds = not is_empty(conn)
        except DBAPIError as exc:
            raise BackupError(f"the target {target.describe()} cannot be read ({exc.orig})") from None
        finally:
            engine.dispose()
        if running:
            raise BackupError(
                f"a bot is running on {target.describe()} ({running} process(es) wrote their heartbeat "
                f"in the last {lease_s:g} s): stop it, then restore"
            )
    holds = holds or _media_in_use(target.media_dir)
    if holds and not force:
        raise BackupError(
            f"the target is not empty ({target.describe()} or {target.media_dir} holds data): add --force to "
            "replace it (what it holds is kept beside it, renamed), or restore --to an empty DATA_DIR"
        )
    return holds


def _aside(path: Path, stamp: str) -> Path | None:
    if not path.exists():
        return None
    moved = path.with_name(f"{path.name}.before-restore-{stamp}")
    os.rename(path, moved)
    return moved


def _install_media(unpacked: Unpacked, target: Target, stamp: str, say: Say) -> None:
    media = target.media_dir
    if media.exists() and not _media_in_use(media):
        shutil.rmtree(media)
    moved = _aside(media, stamp)
    if moved:
        say(f"the media files it held are kept in {moved}")
    media.parent.mkdir(parents=True, exist_ok=True)
    if unpacked.media.is_dir():
        shutil.move(str(unpacked.media), str(media))
    else:
        media.mkdir()


def install(
    unpacked: Unpacked, target: Target, replace: bool, say: Say, revision: str | None = None
) -> dict[str, int]:
    """Put the unpacked (and migrated) backup in place of the target; the target's counts afterwards.
    `revision`: the backup is kept at that schema revision (a rollback), not this code's head: a
    PostgreSQL target is first brought down to it."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    sqlite_file = target.sqlite_file()
    if sqlite_file is not None:
        sqlite_file.parent.mkdir(parents=True, exist_ok=True)
        for suffix in ("-wal", "-shm"):
            _aside(Path(f"{sqlite_file}{suffix}"), stamp)
        moved = _aside(sqlite_file, stamp)
        if moved:
            say(f"the database it replaces is kept as {moved}")
        shutil.move(str(unpacked.database), str(sqlite_file))
    else:
        try:
            if revision is not None:
                downgrade(target.database_url, revision)
            load_snapshot(
                unpacked.database, make_engine(target.database_url), replace=replace, revision=revision
            )
        except SnapshotError as exc:
            raise BackupError(str(exc)) from None
    _install_media(unpacked, target, stamp, say)
    engine = make_engine(target.database_url)
    try:
        with engine.connect() as conn:
            return table_counts(conn)
    finally:
        engine.dispose()


def restore(
    source: Path,
    target: Target,
    identities: Sequence[Identity],
    *,
    force: bool = False,
    dry_run: bool = False,
    lease_s: float = 15.0,
    say: Say = print,
    migrate: bool = True,
) -> Manifest:
    """`python -m bot restore`: check, unpack, migrate and (unless `dry_run`) put a backup in place of the
    target, printing each table's rows against the manifest; BackupError (nothing changed) on a problem.
    `migrate=False` (`python -m bot rollback`) keeps the backup at its own schema revision."""
    manifest_path = find_manifest(source)
    manifest = read_manifest(manifest_path)
    check_revision(manifest.contents.schema_revision)
    say(
        f"backup {manifest.name} of {manifest.contents.created_at} ({manifest.contents.database}, schema "
        f"{manifest.contents.schema_revision}, {len(manifest.parts)} part(s), "
        f"{'encrypted' if manifest.encrypted else 'not encrypted'})"
    )
    if not dry_run:
        check_target(target, lease_s, force)
    target.work.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=".restore-", dir=target.work))
    try:
        unpacked = unpack(manifest_path, identities, work)
        say(f"every part's SHA-256 matches; {unpacked.manifest.contents.media_files} media file(s) checked")
        if migrate:
            migrate_copy(unpacked, say)
        if dry_run:
            for line in unpacked.lines:
                say(line)
            say("dry run: the backup is sound and restores; nothing was changed")
            return manifest
        check_target(target, lease_s, force)  # again: a bot may have started meanwhile
        kept = None if migrate else manifest.contents.schema_revision
        counts = install(unpacked, target, replace=force, say=say, revision=kept)
    except OSError as exc:
        if disk_full(exc):
            raise BackupError(
                f"the disk is full while restoring into {target.work}; the target is unchanged"
            ) from None
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    mismatched = 0
    for table in sorted(set(counts) | set(manifest.contents.tables)):
        want, got = manifest.contents.tables.get(table), counts.get(table)
        if want is None:
            say(f"{table}: {got} row(s) (a table newer than the backup)")
        elif got == want:
            say(f"{table}: {got} row(s), manifest {want}: ok")
        else:
            mismatched += 1
            say(f"{table}: {got} row(s), manifest {want}: DIFFERENT (changed by a migration?)")
    say(
        f"restored into {target.describe()} and {target.media_dir}"
        + ("" if not mismatched else f"; {mismatched} table(s) differ")
    )
    return manifest


@dataclass
class DrillResult:
    """The outcome of a restore drill."""

    name: str
    ok: bool
    problem: str = ""


def drill(
    manifest_path: Path,
    identities: Sequence[Identity],
    work_parent: Path,
    checkpoint: Checkpoint = lambda _: None,
) -> DrillResult:
    """Restore a backup into a private scratch folder in `work_parent` (never in the folder of backups the
    backup lies in: then the system's temporary folder), compare it with its manifest, migrate it, delete
    it."""
    name = manifest_path.name.removesuffix(MANIFEST_SUFFIX)
    try:
        with scratch(outside(work_parent, manifest_path.parent.parent)) as work:
            return _drill(manifest_path, identities, work, name, checkpoint)
    except BackupError as exc:
        return DrillResult(name, False, str(exc))
    except Exception as exc:  # a fault the checks did not name: still the drill's finding
        return DrillResult(name, False, f"{type(exc).__name__}: {exc}")


def _drill(
    manifest_path: Path, identities: Sequence[Identity], work: Path, name: str, checkpoint: Checkpoint
) -> DrillResult:
    unpacked = unpack(manifest_path, identities, work)
    checkpoint("unpacked")
    migrate_copy(unpacked, lambda _: None)
    engine = make_engine(sqlite_url(unpacked.database))
    try:
        with engine.connect() as conn:
            if revision_of(conn) != head_revision():
                return DrillResult(name, False, "the restored database did not migrate to this code's schema")
    finally:
        engine.dispose()
    return DrillResult(name, True)
