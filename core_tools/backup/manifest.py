"""A backup's manifest: what it holds and how to check it, as JSON beside its parts (and sent with them).

The manifest is not encrypted: it holds no content, only the backup's name and time, the database kind and
schema revision, row counts per table, the number and size of media files, whether and for whom the parts
are encrypted, and each part's name, size and SHA-256. The archive inside the parts carries the same facts
(`contents.json`), so a manifest edited or swapped for another backup's is found out at restore.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

FORMAT = 1
MANIFEST_SUFFIX = ".manifest.json"
CONTENTS = "contents.json"  # the archive's first member: the manifest's facts without the parts
DATABASE = "database.sqlite"  # the archive's snapshot of the database
MEDIA = "media"  # the archive's folder of MEDIA_DIR's files


class BackupError(Exception):
    """A backup, restore, drill, export or erase could not be done; the message is one line for a person."""


@dataclass(frozen=True)
class Part:
    """One file of a backup: its name, size and SHA-256 (hex)."""

    name: str
    size: int
    sha256: str


@dataclass
class Contents:
    """What a backup holds (the archive's `contents.json` and the manifest's facts)."""

    name: str
    created_at: str  # ISO 8601, UTC
    database: str  # the kind of database it was taken from: sqlite | postgresql
    schema_revision: str | None
    tables: dict[str, int]
    media_files: int = 0
    media_bytes: int = 0

    def to_dict(self) -> dict[str, Any]:
        """The JSON object."""
        return asdict(self)


@dataclass
class Manifest:
    """The manifest of a backup: its contents, its encryption and its parts."""

    contents: Contents
    encrypted: bool
    recipients: list[str] = field(default_factory=list)
    parts: list[Part] = field(default_factory=list)

    @property
    def name(self) -> str:
        """The backup's name (also the prefix of its files)."""
        return self.contents.name

    @property
    def size(self) -> int:
        """The bytes of all parts."""
        return sum(p.size for p in self.parts)

    def file_name(self) -> str:
        """The manifest's own file name."""
        return f"{self.name}{MANIFEST_SUFFIX}"

    def to_json(self) -> str:
        """The manifest as indented JSON."""
        body = {
            "format": FORMAT,
            **self.contents.to_dict(),
            "encrypted": self.encrypted,
            "recipients": self.recipients,
            "parts": [asdict(p) for p in self.parts],
        }
        return json.dumps(body, indent=2, sort_keys=False) + "\n"

    def write(self, folder: Path) -> Path:
        """Write the manifest into `folder` (flushed to disk); returns its path."""
        path = folder / self.file_name()
        with path.open("w", encoding="utf-8") as handle:
            handle.write(self.to_json())
            handle.flush()
            os.fsync(handle.fileno())
        return path


def _need(body: dict[str, Any], key: str, kind: type | tuple[type, ...], where: str) -> Any:
    value = body.get(key)
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise BackupError(f"{where}: the field {key!r} is missing or not valid")
    return value


def _count(body: dict[str, Any], key: str, where: str, default: int | None = 0) -> int:
    value = body.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BackupError(f"{where}: the field {key!r} is not valid")
    return value


def _plain_text(value: str) -> bool:
    return value.isprintable() and len(value) <= 255


def contents_from(body: Any, where: str) -> Contents:
    """Contents from a JSON object (the manifest's or the archive's), checked field by field."""
    if not isinstance(body, dict):
        raise BackupError(f"{where} is not a backup manifest")
    tables = _need(body, "tables", dict, where)
    if not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
        for k, v in tables.items()
    ):
        raise BackupError(f"{where}: the table counts are not valid")
    revision = body.get("schema_revision")
    if revision is not None and not (isinstance(revision, str) and _plain_text(revision)):
        raise BackupError(f"{where}: the field 'schema_revision' is not valid")
    name = _need(body, "name", str, where)
    if not _plain_text(name):
        raise BackupError(f"{where}: the field 'name' is not valid")
    created_at = _need(body, "created_at", str, where)
    try:
        datetime.fromisoformat(created_at)
    except ValueError:
        raise BackupError(f"{where}: the field 'created_at' is not a time") from None
    return Contents(
        name=name,
        created_at=created_at,
        database=_need(body, "database", str, where),
        schema_revision=revision,
        tables=dict(tables),
        media_files=_count(body, "media_files", where),
        media_bytes=_count(body, "media_bytes", where),
    )


def read_manifest(path: Path) -> Manifest:
    """Read and check a manifest file; BackupError with the reason when it is not one."""
    where = f"the manifest {path.name}"
    try:
        body = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BackupError(f"there is no manifest at {path}") from None
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BackupError(f"{where} cannot be read ({str(exc)[:200]})") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise BackupError(f"{where} is not a backup manifest of format {FORMAT}")
    contents = contents_from(body, where)
    parts_raw = _need(body, "parts", list, where)
    parts: list[Part] = []
    for raw in parts_raw:
        if not isinstance(raw, dict):
            raise BackupError(f"{where}: a part entry is not valid")
        name = _need(raw, "name", str, where)
        if "/" in name or "\\" in name or name.startswith(".") or not _plain_text(name):
            raise BackupError(f"{where}: the part name {name[:40]!r} is not a plain file name")
        parts.append(Part(name, _count(raw, "size", where, None), _need(raw, "sha256", str, where)))
    if not parts:
        raise BackupError(f"{where} lists no parts")
    encrypted = _need(body, "encrypted", bool, where)
    recipients = body.get("recipients", [])
    if not isinstance(recipients, list) or not all(isinstance(r, str) for r in recipients):
        raise BackupError(f"{where}: the field 'recipients' is not valid")
    return Manifest(contents, encrypted, list(recipients), parts)
