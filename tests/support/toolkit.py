"""Where the tests' own sandbox toolkits live: a directory that code runs can see."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def sandbox_visible_dir(name: str) -> Path:
    """A directory for the tests' own toolkits that code runs can see: when the suite runs as root (the code
    then runs as nobody, and bwrap mounts the toolkit as nobody), below directories anyone may enter.
    `ASSISTANT_TEST_CACHE` chooses another."""
    chosen = os.environ.get("ASSISTANT_TEST_CACHE")
    if chosen:
        return Path(chosen) / name
    base = REPO / ".cache"
    if os.geteuid() == 0 and not all(os.stat(p).st_mode & 0o001 for p in REPO.parents if p != Path("/")):
        base = Path("/var/cache/assistant-tests")
    return base / name
