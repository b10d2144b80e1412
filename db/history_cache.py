"""The histories this process read, kept with their session's revision, so a turn reads its session's
messages again only when someone else changed them.

Every turn sends its session's history: at 200 messages, reading them was the largest single part of a
plain turn's own work (bench/bench_chat.py). The database keeps a revision per session that every insert,
update and delete of one of its messages raises by one (migration 0023's triggers: whoever writes, from any
process, by any code path, a cascade included). A history is used from here only when its revision is the
session's current one, read in the same transaction as it would have been read:

- A read checks the revision first and reads the rows only when it moved. (The rows, read after the
  revision, can only be newer than it: the next read finds the revision moved and reads them again.)
- A turn's own writes (its user messages stored, its answer and their statuses) are applied here too, when
  the revision after them is exactly the one before plus the rows they changed: any other change in between
  (an edit, a /forget, another process) raised it by more, and the history is dropped and read again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

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
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._most = sessions
        self._lock = threading.Lock()  # (PostgreSQL's calls run in worker threads)

    def holds(self, session_id: str) -> bool:
        """Whether a history of the session is kept (a write then reads the revision to keep it current)."""
        return session_id in self._kept

    def get(self, session_id: str, revision: int, limit: int) -> list[StoredMessage] | None:
        """The session's newest `limit` messages if they are kept for this revision, else None."""
        with self._lock:
            kept = self._kept.get(session_id)
            if kept is None or kept.revision != revision or kept.limit != limit:
                return None
            self._kept.move_to_end(session_id)
            return list(kept.rows)

    def put(self, session_id: str, revision: int, limit: int, rows: list[StoredMessage]) -> None:
        """Keep a history just read (its rows read after `revision`)."""
        with self._lock:
            self._kept[session_id] = _Kept(revision, limit, list(rows))
            self._kept.move_to_end(session_id)
            while len(self._kept) > self._most:
                self._kept.popitem(last=False)

    def wrote(
        self,
        session_id: str,
        changed: int,
        revision: int,
        *,
        added: Iterable[StoredMessage] = (),
        statuses: Mapping[int, str] | None = None,
    ) -> None:
        """This process changed `changed` message rows of the session in a transaction that ended at
        `revision`: messages `added` and `statuses` set. Applied when nothing else changed the session
        since its history was read, else the history is dropped."""
        with self._lock:
            kept = self._kept.get(session_id)
            if kept is None:
                return
            if kept.revision + changed != revision:
                del self._kept[session_id]
                return
            rows = kept.rows
            if statuses:
                rows = [replace(m, status=statuses[m.id]) if m.id in statuses else m for m in rows]
            rows.extend(added)
            kept.rows = rows[-kept.limit :]
            kept.revision = revision

    def drop(self, session_id: str) -> None:
        """Forget a session's history (it is read again next time)."""
        with self._lock:
            self._kept.pop(session_id, None)
