"""A byte stream cut into numbered part files (each with its size and SHA-256), and read back whole."""

from __future__ import annotations

import errno
import hashlib
import io
import os
from collections.abc import Sequence
from pathlib import Path

from core_tools.backup.manifest import BackupError, Part

CHUNK = 1 << 20


class PartWriter(io.RawIOBase):
    """A writable stream that fills `folder/prefix.000`, `.001`, ... each at most `part_bytes` long."""

    def __init__(self, folder: Path, prefix: str, part_bytes: int) -> None:
        super().__init__()
        if part_bytes < 1:
            raise ValueError("part_bytes must be positive")
        self.folder = folder
        self.prefix = prefix
        self.part_bytes = part_bytes
        self.parts: list[Part] = []
        self.error: OSError | None = None  # the first write error (the encrypter hides its errno)
        self._file: io.BufferedWriter | None = None
        self._hash = hashlib.sha256()
        self._size = 0

    def writable(self) -> bool:
        return True

    def _name(self) -> str:
        return f"{self.prefix}.{len(self.parts):03d}"

    def _finish_part(self) -> None:
        if self._file is None:
            return
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        self.parts.append(Part(self._name(), self._size, self._hash.hexdigest()))
        self._file, self._hash, self._size = None, hashlib.sha256(), 0

    def write(self, data: bytes | bytearray | memoryview) -> int:  # type: ignore[override]
        """Write bytes, starting a new part whenever one is full."""
        view = memoryview(data).cast("B")
        total = len(view)
        try:
            while view:
                if self._file is None:
                    self._file = (self.folder / self._name()).open("xb")
                room = self.part_bytes - self._size
                chunk = view[:room]
                self._file.write(chunk)
                self._hash.update(chunk)
                self._size += len(chunk)
                view = view[len(chunk) :]
                if self._size >= self.part_bytes:
                    self._finish_part()
        except OSError as exc:
            self.error = self.error or exc
            raise
        return total

    def close(self) -> None:
        """Finish the last part (an empty stream still makes one empty part)."""
        if not self.closed:
            try:
                if self._file is None and not self.parts:
                    self._file = (self.folder / self._name()).open("xb")
                self._finish_part()
            finally:
                super().close()


class PartReader(io.RawIOBase):
    """The parts' bytes as one readable stream, in order."""

    def __init__(self, paths: Sequence[Path]) -> None:
        super().__init__()
        self._paths = list(paths)
        self._file: io.BufferedReader | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        """Fill `buffer` from the current part, going on to the next at its end."""
        while True:
            if self._file is None:
                if not self._paths:
                    return 0
                self._file = self._paths.pop(0).open("rb")
            n = self._file.readinto(buffer)
            if n:
                return n
            self._file.close()
            self._file = None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        super().close()


def verify_parts(folder: Path, parts: Sequence[Part]) -> list[Path]:
    """Check that every part is there with its size and SHA-256; their paths, or BackupError naming the
    first part that is missing, of another size or corrupted."""
    paths: list[Path] = []
    for number, part in enumerate(parts, 1):
        path = folder / part.name
        where = f"part {number} of {len(parts)} ({part.name})"
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise BackupError(f"{where} is missing from {folder}") from None
        except (OSError, ValueError) as exc:
            raise BackupError(f"{where} cannot be read ({exc})") from None
        if size != part.size:
            raise BackupError(
                f"{where} is {size} bytes, the manifest says {part.size}: it is incomplete or not "
                "this backup's"
            )
        digest = hashlib.sha256()
        with path.open("rb") as handle:
            while chunk := handle.read(CHUNK):
                digest.update(chunk)
        if digest.hexdigest() != part.sha256:
            raise BackupError(f"{where} is corrupted: its SHA-256 differs from the manifest's")
        paths.append(path)
    return paths


def disk_full(exc: BaseException | None) -> bool:
    """Whether an error is the disk (or a quota) being full."""
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
