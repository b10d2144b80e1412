"""The user's files in and a run's files out: in/ (read-only) and out/ of the sandbox's working directory.

In a bwrap sandbox the working directory is a size-capped tmpfs that vanishes with the run, so out/ comes
back as a tar stream that a shell epilogue writes to a pipe once the program has ended: what can come out
is bounded by the tmpfs size, and nothing the code does writes to the host's disk. Unsandboxed (when the
operator allows it) the scratch directory is a host directory and out/ is read from it.
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath

from core_tools.sandbox.isolation import closed_to_runs
from core_tools.sandbox.model import FileLimits
from core_tools.types import OutputFile

IN_DIR = "in"
OUT_DIR = "out"


def input_dir() -> str:
    """An empty host directory, readable by the sandbox's uid, for a read-only bind as in/ (filled later by
    `write_inputs`, before the program is sent: a sandbox may be started before its files are known)."""
    root = tempfile.mkdtemp(prefix="code-in-", dir=_input_base())
    os.chmod(root, 0o755)  # noqa: S103 - the sandbox's unprivileged uid must read it; it is mounted read-only
    return root


def _input_base() -> str | None:
    """Where in/ directories are made: the temporary directory, unless bwrap could not enter it (a TMPDIR
    in a 0700 home with the bot run as root, see `closed_to_runs`), then a system one it can enter."""
    for base in (tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm"):  # noqa: S108
        if os.path.isdir(base) and closed_to_runs(Path(base)) is None:
            return base
    return None  # mkdtemp's own choice: the run then fails with bwrap's reason


def write_inputs(root: str, files: Mapping[str, bytes], mode: int = 0o644) -> None:
    """Write the files into `root` (made by `input_dir`), readable by the sandbox's uid."""
    for name, data in files.items():
        path = Path(root) / PurePosixPath(name).name
        path.write_bytes(data)
        os.chmod(path, mode)


def remove(path: str | None) -> None:
    """Delete a temporary directory, if any."""
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


def epilogue_argv(shell: str, out_dir: str, fd: int, command: list[str]) -> list[str]:
    """`command` wrapped so that out/ is streamed as a tar to `fd` after it ends; its exit code is kept."""
    # The tar starts once the program has ended (whatever its exit) and goes to the pipe, not to stdout.
    # bash, not sh: dash's `>&N` takes single-digit descriptors only, and the pipe's number is the bot's
    # (reopening it through /proc is denied: the pipe belongs to the bot's uid, not the sandbox's).
    # --sparse: a file of holes (truncate to 15 MB) travels as its map, not as megabytes of zeros that
    # would push every file after it beyond what the bot reads back.
    archive = f"tar --sort=name --sparse -C {out_dir} -cf - . >&{fd} 2>/dev/null"
    script = f'"$@"; rc=$?; if [ -d {out_dir} ]; then {archive}; fi; exit "$rc"'
    return [shell, "-c", script, "sh", *command]


def human_size(n: int) -> str:
    """A byte count as people read it: 512 bytes, 12 KB, 15.5 MB."""
    if n < 1024:
        return f"{n} bytes"
    if n < 1024 * 1024:
        return f"{n / 1024:.0f} KB"
    return f"{n / (1024 * 1024):.1f}".removesuffix(".0") + " MB"


def _nothing() -> None:
    """What a tar member without data reads as."""


class _Picker:
    """Takes files in the order offered, within the count and size limits; notes the others."""

    def __init__(self, limits: FileLimits, total: int | None) -> None:
        self.limits = limits
        self.total = total  # bytes of all kept files together, None: no bound beyond the two limits
        self.taken = 0
        self.kept: list[OutputFile] = []
        self.skipped: list[str] = []
        self.last = ""  # the last file dealt with (kept or noted)

    def offer(self, path: str, size: int, read: Callable[[], bytes | None]) -> None:
        """One regular file of out/: kept (read) when it fits, else a line saying why not."""
        name = PurePosixPath(path).name
        label = f"{name} ({human_size(size)})"
        if len(self.kept) >= self.limits.max_files:
            self.skipped.append(f"{label}: over the limit of {self.limits.max_files} files")
        elif size > self.limits.max_bytes:
            self.skipped.append(f"{label}: over the limit of {human_size(self.limits.max_bytes)} per file")
        elif self.total is not None and self.taken + size > self.total:
            self.skipped.append(f"{label}: over the limit of {human_size(self.total)} for all files together")
        elif (data := read()) is not None:
            self.kept.append(OutputFile(name, data))
            self.taken += len(data)
        self.last = name


def collect_tar(
    data: bytes, limits: FileLimits, *, cut: bool = False, total: int | None = None
) -> tuple[tuple[OutputFile, ...], tuple[str, ...]]:
    """Regular files of a tar of out/ (flattened to their names), within the limits; and what was left,
    as "name (size): why".

    `cut`: `data` is only the head of a longer stream (the reader's cap): the whole files in it are taken,
    and a line says the rest was not looked at. `total`: the most all kept files may hold together (files of
    holes are small in the tar, not once read).
    """
    picker = _Picker(limits, total)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            for member in archive:
                if member.isfile():
                    handle = archive.extractfile(member)
                    picker.offer(member.name, member.size, handle.read if handle is not None else _nothing)
    except (tarfile.TarError, EOFError, OSError):
        if data and not cut:
            picker.skipped.append(
                "out/: the files could not be read back (the run was cut off while writing)"
            )
    if cut:
        after = f" after {picker.last}" if picker.last else ""
        picker.skipped.append(
            f"out/: the files{after} were not looked at: out/ as a whole is larger than the "
            f"{human_size(len(data))} the sandbox hands back"
        )
    return tuple(picker.kept), tuple(picker.skipped)


def collect_dir(
    root: str, limits: FileLimits, total: int | None = None
) -> tuple[tuple[OutputFile, ...], tuple[str, ...]]:
    """The same as `collect_tar` for a host directory (unsandboxed runs): only what is kept is read."""
    picker = _Picker(limits, total)
    with contextlib.suppress(OSError):
        for path in sorted(Path(root).rglob("*")):
            if path.is_file() and not path.is_symlink():
                picker.offer(str(path.relative_to(root)), path.stat().st_size, path.read_bytes)
    return tuple(picker.kept), tuple(picker.skipped)
