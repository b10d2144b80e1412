"""The histories this process read, kept with their session's revision, so a turn reads its session's
messages again only when someone else changed them.

Every turn sends its session's history: at 200 messages, reading them was the largest single part of a
plain turn's own work (bench/bench_chat.py). The database keeps a revision per session that every insert,
update and delete of one of its messages raises by one (migration 0023's triggers: whoever writes, from any
process, by any code path, a cascade included). A history is used from here only when its revision is the
session's current one, read in the same transaction as it would have been read:

- A read checks the revision first and reads the rows only when it moved. (The rows, read after the
  revision, can only be newer than it: the next read finds the revision moved and reads them again.)
- A turn's own writes (its user messages stored, its answer and their statuses) are applied here too, and
  the history is then current for the revision before them plus the rows they changed. Whenever the
  revision is next read (a history, the next turn's `open_turn`), any other change since (an edit, a
  /forget, another process) shows as a larger one, and the history is dropped and read again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from cachetools import LRUCache

from db.conversation_records import StoredMessage

SESSIONS_KEPT = 256  # the most recently used histories: a few hundred rows each


@dataclass(slots=True)
class _Kept:
    revision: int
    limit: int  # the newest `limit` messages of the session were read
    rows: list[StoredMessage]  # oldest first


class HistoryCache:
    """Histories by session id, with the revision they are current for (see the module's doc)."""

    def __init__(self, sessions: int = SESSIONS_KEPT) -> None:
        self._kept: LRUCache[str, _Kept] = LRUCache(sessions)  # the least recently used out
        self._lock = threading.Lock()  # (PostgreSQL's calls run in worker threads; LRUCache is not safe)

    def get(self, session_id: str, revision: int, limit: int) -> list[StoredMessage] | None:
        """The session's newest `limit` messages if they are kept for this revision, else None."""
        with self._lock:
            kept = self._kept.get(session_id)
            if kept is None or kept.revision != revision or limit <= 0:
                return None
            if limit > kept.limit and len(kept.rows) >= kept.limit:  # more than was read
                return None
            return kept.rows[-limit:]

    def put(self, session_id: str, revision: int, limit: int, rows: list[StoredMessage]) -> None:
        """Keep a history just read (its rows read after `revision`); a shorter read of the same revision
        leaves a longer one kept (a check of the last message does not evict the turn's history)."""
        with self._lock:
            kept = self._kept.get(session_id)
            if kept is not None and kept.revision == revision and limit < kept.limit:
                return
            self._kept[session_id] = _Kept(revision, limit, list(rows))

    def wrote(
        self,
        session_id: str,
        changed: int,
        revision: int | None,
        *,
        added: Iterable[StoredMessage] = (),
        statuses: Mapping[int, str] | None = None,
    ) -> None:
        """This process changed exactly `changed` message rows of the session in one transaction
        (committed): messages `added` and `statuses` set. `revision`: the session's revision after it,
        when the transaction read it; the history is dropped unless that is the kept one plus `changed`
        (nothing else changed the session). Without it, the history is kept for the revision it should
        have now, and the next read of the revision (a history, the next turn's `open_turn`) tells
        whether it does."""
        with self._lock:
            kept = self._kept.get(session_id)
            if kept is None:
                return
            expected = kept.revision + changed
            if revision is not None and revision != expected:
                del self._kept[session_id]
                return
            rows = kept.rows  # (a list of this cache's own: `get` hands out copies)
            left = dict(statuses or {})
            for i in range(len(rows) - 1, -1, -1):  # a turn's messages are the newest: from the end
                if not left:
                    break
                if (status := left.pop(rows[i].id, None)) is not None:
                    rows[i] = replace(rows[i], status=status)
            rows.extend(added)
            del rows[: max(0, len(rows) - kept.limit)]
            kept.revision = expected

    def drop(self, session_id: str) -> None:
        """Forget a session's history (it is read again next time)."""
        with self._lock:
            self._kept.pop(session_id, None)
