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
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from core_tools.sandbox.model import FileLimits
from core_tools.types import OutputFile

IN_DIR = "in"
OUT_DIR = "out"


def write_inputs(files: Mapping[str, bytes]) -> str:
    """A host directory holding the files, readable by the sandbox's uid, for a read-only bind."""
    root = tempfile.mkdtemp(prefix="code-in-")
    os.chmod(root, 0o755)  # noqa: S103 - the sandbox's unprivileged uid must read it; it is mounted read-only
    for name, data in files.items():
        path = Path(root) / PurePosixPath(name).name
        path.write_bytes(data)
        os.chmod(path, 0o644)
    return root


def remove(path: str | None) -> None:
    """Delete a temporary directory, if any."""
    if path is not None:
        shutil.rmtree(path, ignore_errors=True)


def epilogue_argv(shell: str, out_dir: str, fd: int, command: list[str]) -> list[str]:
    """`command` wrapped so that out/ is streamed as a tar to `fd` after it ends; its exit code is kept."""
    # The tar starts once the program has ended (whatever its exit) and goes to the pipe, not to stdout.
    # bash, not sh: dash's `>&N` takes single-digit descriptors only, and the pipe's number is the bot's
    # (reopening it through /proc is denied: the pipe belongs to the bot's uid, not the sandbox's).
    archive = f"tar --sort=name -C {out_dir} -cf - . >&{fd} 2>/dev/null"
    script = f'"$@"; rc=$?; if [ -d {out_dir} ]; then {archive}; fi; exit "$rc"'
    return [shell, "-c", script, "sh", *command]


def collect_tar(data: bytes, limits: FileLimits) -> tuple[tuple[OutputFile, ...], tuple[str, ...]]:
    """Regular files of a tar of out/ (flattened to their names), within the limits; and what was left."""
    kept: list[OutputFile] = []
    skipped: list[str] = []
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
            for member in archive:
                if not member.isfile():
                    continue
                name = PurePosixPath(member.name).name
                if len(kept) >= limits.max_files:
                    skipped.append(f"{name}: over the limit of {limits.max_files} files")
                    continue
                if member.size > limits.max_bytes:
                    skipped.append(f"{name}: {member.size} bytes, over the limit of {limits.max_bytes}")
                    continue
                handle = archive.extractfile(member)
                if handle is not None:
                    kept.append(OutputFile(name, handle.read()))
    except (tarfile.TarError, EOFError, OSError):
        if data:
            skipped.append("out/: the files could not be read back (the run was cut off while writing)")
    return tuple(kept), tuple(skipped)


def collect_dir(root: str, limits: FileLimits) -> tuple[tuple[OutputFile, ...], tuple[str, ...]]:
    """The same as `collect_tar` for a host directory (unsandboxed runs)."""
    buffer = io.BytesIO()
    with contextlib.suppress(OSError), tarfile.open(fileobj=buffer, mode="w:") as archive:
        for path in sorted(Path(root).rglob("*")):
            if path.is_file() and not path.is_symlink():
                archive.add(path, arcname=str(path.relative_to(root)))
    return collect_tar(buffer.getvalue(), limits)
