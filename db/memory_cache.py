"""What every turn's prompt reads of a user's memories, kept between turns with the user's memory revision.

Migration 0024's triggers move `memory_revisions.revision` for every insert, update and delete of one of the
user's memories, whoever writes (any process, any code path, an erase). A read takes the revision first and
is served from what this process kept when the revision has not moved: one indexed read instead of two
(db.memories.prompt_memories, about 0.1 ms of a turn's time on the event loop, bench/bench_chat.py). Rows
read after the revision can only be newer than it: the next read finds the revision moved and reads again.

Time is applied to what was kept: a session memory that has expired since is left out (and the rows are
read again when the kept ones filled the limit, as more may stand behind them). Whether the user has a
long or mid memory worth a recall is kept as it was read: expiry can only make it false, and a recall then
finds nothing, as it would have.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime

from cachetools import LRUCache
from sqlalchemy import Column, Connection, MetaData, Table, bindparam, select
from sqlalchemy.types import BigInteger

from db.memories import MemoryRow, prompt_memories
from db.prepared import Prepared

# Created by migration 0024's raw SQL (not a model: the database's own bookkeeping); declared here to read.
_REVISIONS = Table(
    "memory_revisions",
    MetaData(),
    Column("user_id", BigInteger, primary_key=True),
    Column("revision", BigInteger, nullable=False),
)
_REVISION_RUN = Prepared(select(_REVISIONS.c.revision).where(_REVISIONS.c.user_id == bindparam("uid")))


@dataclass(frozen=True)
class _Kept:
    revision: int | None  # None: the user has had no memory yet
    has_relevant: bool
    rows: tuple[MemoryRow, ...]


class PromptMemories:
    """A process's reads of `prompt_memories`, per (user, session, limit), the least recently used out."""

    def __init__(self, size: int = 1024) -> None:
        self._kept: LRUCache[tuple[int, str, int], _Kept] = LRUCache(size)
        self._lock = threading.Lock()  # reads may run in worker threads; an LRUCache is not thread-safe

    def read(
        self, conn: Connection, user_id: int, session_id: str, now: datetime, limit: int = 50
    ) -> tuple[bool, list[MemoryRow]]:
        """As `prompt_memories(conn, user_id, session_id, now, limit)`, from what was kept if nothing of
        the user's memories changed since."""
        revision = _REVISION_RUN.scalar(conn, {"uid": user_id})
        key = (user_id, session_id, limit)
        with self._lock:
            kept = self._kept.get(key)  # (marked as just used)
        if kept is not None and kept.revision == revision:
            rows = [r for r in kept.rows if r.expires_at is None or r.expires_at > now]
            if len(rows) == len(kept.rows) or len(kept.rows) < limit:
                return kept.has_relevant, rows
        has_relevant, fresh = prompt_memories(conn, user_id, session_id, now, limit)
        with self._lock:
            self._kept[key] = _Kept(revision, has_relevant, tuple(fresh))
        return has_relevant, fresh
