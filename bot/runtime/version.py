"""The running code's version: pyproject's project version, with the git commit when the code is a git
checkout (`0.1.0+g1a2b3c4`). A Docker image has pyproject.toml but no .git: then the version alone. Read
once, without running git (the .git files themselves), and never an error: "unknown" at worst."""

from __future__ import annotations

import tomllib
from datetime import datetime
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the checkout (or the image's /app): pyproject.toml's folder


def project_version(root: Path = ROOT) -> str:
    """[project] version of pyproject.toml; "unknown" without one."""
    try:
        body = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
        version = body["project"]["version"]
    except (OSError, ValueError, KeyError, TypeError):
        return "unknown"
    return str(version) if isinstance(version, str) and version else "unknown"


def git_commit(root: Path = ROOT) -> str | None:
    """The commit the checkout is at (HEAD, through its branch's ref or packed-refs); None without .git."""
    git = root / ".git"
    try:
        if git.is_file():  # a worktree: "gitdir: /path/to/.git/worktrees/name"
            line = git.read_text(encoding="utf-8").strip()
            if not line.startswith("gitdir:"):
                return None
            git = (root / line.removeprefix("gitdir:").strip()).resolve()
        head = (git / "HEAD").read_text(encoding="utf-8").strip()
        if not head.startswith("ref:"):
            return head or None
        ref = head.removeprefix("ref:").strip()
        for base in (git, _common_dir(git)):
            loose = base / ref
            if loose.is_file():
                return loose.read_text(encoding="utf-8").strip() or None
            packed = base / "packed-refs"
            if packed.is_file():
                for row in packed.read_text(encoding="utf-8").splitlines():
                    sha, _, name = row.partition(" ")
                    if name == ref:
                        return sha
    except (OSError, UnicodeDecodeError):
        return None
    return None


def _common_dir(git: Path) -> Path:
    common = git / "commondir"
    try:
        return (git / common.read_text(encoding="utf-8").strip()).resolve()
    except OSError:
        return git


@cache
def code_version() -> str:
    """This code's version: `0.1.0+g1a2b3c4` in a git checkout, `0.1.0` without one."""
    version, commit = project_version(), git_commit()
    return f"{version}+g{commit[:7]}" if commit else version


def version_line(upgraded_at: datetime | None, from_version: str | None = None) -> str:
    """One line for /help and doctor: the running version and when the database was last upgraded."""
    line = f"Version {code_version()}"
    if upgraded_at is None:
        return line
    when = upgraded_at.strftime("%Y-%m-%d %H:%M UTC")
    return line + f", upgraded {when}" + (f" from {from_version}" if from_version else "")


def previous_commit(root: Path = ROOT) -> str | None:
    """The commit the checkout was at before it moved to HEAD (a pull, a checkout), from HEAD's reflog;
    None without .git or a reflog entry that says."""
    head = git_commit(root)
    git = root / ".git"
    try:
        if git.is_file():
            git = (root / git.read_text(encoding="utf-8").strip().removeprefix("gitdir:").strip()).resolve()
        rows = (git / "logs" / "HEAD").read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return None
    for row in reversed(rows):
        old, _, rest = row.partition(" ")
        new = rest.partition(" ")[0]
        if new == head and old != new and old.strip("0"):
            return old
    return None
