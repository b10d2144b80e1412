"""The lessons note per user: built from the database only when the user's latest failed run changed.

The note reaches the model in the `code` tool's description of that user's turns (the registry's per-user
tool note): a plain turn reads it from memory here and runs no query. It is recomputed after a failed run
of this process, when a code call finds that another process logged a newer failure, and for every user
with recent failures once at start (one query).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from core_tools.code.patterns import Failure, lessons
from db.executions import Executions, RecentFailure
from db.models import utcnow

log = logging.getLogger(__name__)

WINDOW = timedelta(days=14)  # failures older than this teach nothing any more
PER_USER = 20  # the latest failures a note is built from


_STATES = ((False, False), (False, True), (True, False), (True, True))


@dataclass(frozen=True)
class _Entry:
    latest_failure: str | None  # what the notes were built for
    # The note for each (network, toolkit) state of the sandbox: the toolkit's install may end, or a sandbox
    # service's limits become known, between two failures; picking one is a lookup, not a rebuild.
    notes: dict[tuple[bool, bool], str]


class LessonsBook:
    """Per-user lessons notes, cached by the user's latest failed-run id (and the sandbox's state)."""

    def __init__(
        self,
        executions: Executions,
        sandbox_state: Callable[[], tuple[bool, bool]],
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.executions = executions
        self.sandbox_state = sandbox_state  # (network on, data toolkit usable)
        self.clock = clock
        self._entries: dict[int, _Entry] = {}
        self.builds = 0  # how many notes were computed from the database (shown by tests)

    def note(self, user_id: int) -> str | None:
        """The user's note as last built, or None: memory only, never a query (called on every turn)."""
        entry = self._entries.get(user_id)
        return (entry.notes.get(self.sandbox_state()) or None) if entry is not None else None

    def _build(self, user_id: int, latest: str | None, failures: list[RecentFailure]) -> None:
        seen = [Failure(f.error_category, f.language, f.stderr_tail) for f in failures]
        notes = {(net, kit): lessons(seen, network=net, toolkit=kit) for net, kit in _STATES}
        self._entries[user_id] = _Entry(latest, notes)
        self.builds += 1

    def refresh(self, user_id: int, latest: str | None = None) -> None:
        """Bring the user's note up to date (blocking: run in a thread). `latest` is the failed run just
        logged, if the caller knows it; else one query finds it. Rebuilt only when it changed."""
        if latest is None:
            latest = self.executions.latest_failure_id(user_id)
        entry = self._entries.get(user_id)
        if entry is not None and entry.latest_failure == latest:
            return
        since = self.clock() - WINDOW
        failures = [] if latest is None else self.executions.recent_failures(since, PER_USER, user_id)
        self._build(user_id, latest, failures)

    def warm(self) -> int:
        """At start: the notes of every user with failures in the window, from one query; returns how many."""
        by_user: dict[int, list[RecentFailure]] = defaultdict(list)
        for f in self.executions.recent_failures(self.clock() - WINDOW, PER_USER):
            by_user[f.user_id].append(f)
        for user_id, failures in by_user.items():
            self._build(user_id, failures[0].id, failures)  # newest first
        return len(by_user)
