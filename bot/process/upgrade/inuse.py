"""Whether a bot has a SQLite file open: every connection to a database in WAL mode (the bot's) holds a
shared lock on one byte of its -shm file for as long as it is open (SQLite's unix VFS, the "DMS" byte at
offset 128), across processes and containers sharing the volume. An exclusive lock that cannot be had
means someone has it open. Call it before this process opens the file itself: closing the probe's
descriptor drops this process's own POSIX locks on the -shm file."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

DMS_OFFSET = 128  # WALINDEX_LOCK_OFFSET (120) + SQLITE_SHM_NLOCK (8)


def sqlite_in_use(database: Path) -> bool:
    """True when another process has the database open (in WAL mode)."""
    shm = Path(f"{database}-shm")
    try:
        fd = os.open(shm, os.O_RDWR)
    except FileNotFoundError:
        return False  # nobody has it open in WAL mode (the last to close it deletes the -shm)
    except OSError:
        return True  # not ours to write: take it as in use rather than guess
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, DMS_OFFSET, os.SEEK_SET)
    except OSError:
        return True
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, DMS_OFFSET, os.SEEK_SET)
        return False
    finally:
        os.close(fd)
