"""The code execution log: every run is a row; /codestats and /codefailures read it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, case, func, select
from sqlalchemy.orm import InstrumentedAttribute, Session, sessionmaker

from db.models import CodeExecution

FIRST_LINE_CHARS = 200  # of the code line a list of runs carries


@dataclass(frozen=True)
class CodeStats:
    """Aggregates of one user's runs over a period."""

    total: int
    succeeded: int
    failed: int
    avg_ms: float | None
    p95_ms: int | None
    categories: list[tuple[str, int]]  # failures by error category, most frequent first


@dataclass(frozen=True)
class RunRow:
    """One run as a list of runs shows it (no code or output)."""

    id: str
    language: str
    success: bool
    exit_code: int | None
    duration_ms: int | None
    error_category: str | None
    created_at: datetime
    truncated: bool
    files: int  # files the run wrote under out/
    first_line: str = ""  # the code's first line that is not blank (up to FIRST_LINE_CHARS)


@dataclass(frozen=True)
class RunDetail:
    """One run whole: its code, output and the files it wrote ({"name", "size"} each)."""

    run: RunRow
    code: str
    stdout: str
    stderr: str
    stdout_bytes: int
    stderr_bytes: int
    isolation: str
    files_out: list[dict[str, Any]]


def _run_row(r: CodeExecution) -> RunRow:
    return RunRow(
        r.id,
        r.language,
        bool(r.success),
        r.exit_code,
        r.duration_ms,
        r.error_category,
        r.created_at,
        bool(r.truncated),
        len(r.files_out or []),
        next((line.strip() for line in (r.code or "").splitlines() if line.strip()), "")[:FIRST_LINE_CHARS],
    )


@dataclass(frozen=True)
class FailedRun:
    """One failed run, for /codefailures."""

    id: str
    language: str
    error_category: str | None
    created_at: datetime
    code: str
    stderr: str


# The end of a failed run's stderr is where its error is (a traceback ends with the exception): reading only
# that bounds what a query of many failures loads (a run keeps up to 1 MB of stderr).
STDERR_TAIL_CHARS = 2000
CODE_CHARS = 4000


def _tail(column: InstrumentedAttribute[str | None], chars: int) -> ColumnElement[str | None]:
    """The last `chars` characters of a text column, in SQL (substr from a start: SQLite and PostgreSQL)."""
    length = func.length(column)
    return case((length > chars, func.substr(column, length - chars + 1)), else_=column)


@dataclass(frozen=True)
class RecentFailure:
    """A failed run as the lessons note reads it: no code, only what the sandbox said."""

    id: str
    user_id: int
    language: str
    error_category: str | None
    stderr_tail: str


class Executions:
    """Writes and reads `code_executions`."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sm = sessions

    def record(self, row: CodeExecution) -> str:
        """Store one run; returns its id."""
        with self._sm.begin() as s:
            s.add(row)
            s.flush()
            return row.id

    def stats(self, user_id: int, since: datetime) -> CodeStats:
        """Totals, durations and top error categories of the user's runs since `since`."""
        with self._sm() as s:
            rows = s.execute(
                select(CodeExecution.success, CodeExecution.duration_ms, CodeExecution.error_category).where(
                    CodeExecution.user_id == user_id, CodeExecution.created_at >= since
                )
            ).all()
        durations = sorted(r.duration_ms for r in rows if r.duration_ms is not None)
        failed = [r for r in rows if not r.success]
        p95 = durations[min(len(durations) - 1, round(0.95 * (len(durations) - 1)))] if durations else None
        return CodeStats(
            total=len(rows),
            succeeded=len(rows) - len(failed),
            failed=len(failed),
            avg_ms=sum(durations) / len(durations) if durations else None,
            p95_ms=p95,
            categories=Counter(r.error_category or "unknown" for r in failed).most_common(),
        )

    def failures(self, user_id: int, limit: int) -> list[FailedRun]:
        """The user's most recent failed runs, newest first."""
        with self._sm() as s:
            rows = s.scalars(
                select(CodeExecution)
                .where(CodeExecution.user_id == user_id, CodeExecution.success.is_(False))
                .order_by(CodeExecution.created_at.desc())
                .limit(limit)
            ).all()
            return [
                FailedRun(r.id, r.language, r.error_category, r.created_at, r.code, r.stderr or "")
                for r in rows
            ]

    def recent(self, user_id: int, limit: int) -> list[RunRow]:
        """The user's most recent runs, newest first."""
        with self._sm() as s:
            rows = s.scalars(
                select(CodeExecution)
                .where(CodeExecution.user_id == user_id)
                .order_by(CodeExecution.created_at.desc(), CodeExecution.id)
                .limit(limit)
            ).all()
            return [_run_row(r) for r in rows]

    def detail(self, user_id: int, run_id: str) -> RunDetail | None:
        """One run of the user whole; None for an unknown id or another user's."""
        with self._sm() as s:
            r = s.get(CodeExecution, run_id)
            if r is None or r.user_id != user_id:
                return None
            files = [f for f in (r.files_out or []) if isinstance(f, dict)]
            return RunDetail(
                _run_row(r),
                r.code,
                r.stdout or "",
                r.stderr or "",
                r.stdout_bytes,
                r.stderr_bytes,
                r.isolation,
                files,
            )

    def category_examples(self, user_id: int, since: datetime) -> dict[str, FailedRun]:
        """The user's latest failed run of each error category since `since` (code cut to CODE_CHARS,
        stderr to its last STDERR_TAIL_CHARS): one query."""
        category = func.coalesce(CodeExecution.error_category, "unknown")
        ranked = (
            select(
                CodeExecution.id,
                CodeExecution.language,
                category.label("category"),
                CodeExecution.created_at,
                func.substr(CodeExecution.code, 1, CODE_CHARS).label("code"),
                _tail(CodeExecution.stderr, STDERR_TAIL_CHARS).label("stderr"),
                func.row_number()
                .over(partition_by=category, order_by=(CodeExecution.created_at.desc(), CodeExecution.id))
                .label("n"),
            )
            .where(
                CodeExecution.user_id == user_id,
                CodeExecution.success.is_(False),
                CodeExecution.created_at >= since,
            )
            .subquery()
        )
        with self._sm() as s:
            rows = s.execute(select(ranked).where(ranked.c.n == 1)).all()
        return {
            r.category: FailedRun(r.id, r.language, r.category, r.created_at, r.code or "", r.stderr or "")
            for r in rows
        }

    def session_failures(self, user_id: int, session_id: str, limit: int) -> list[FailedRun]:
        """The user's failed runs in one session, newest first (code and stderr cut as above)."""
        with self._sm() as s:
            rows = s.execute(
                select(
                    CodeExecution.id,
                    CodeExecution.language,
                    CodeExecution.error_category,
                    CodeExecution.created_at,
                    func.substr(CodeExecution.code, 1, CODE_CHARS).label("code"),
                    _tail(CodeExecution.stderr, STDERR_TAIL_CHARS).label("stderr"),
                )
                .where(
                    CodeExecution.user_id == user_id,
                    CodeExecution.session_id == session_id,
                    CodeExecution.success.is_(False),
                )
                .order_by(CodeExecution.created_at.desc(), CodeExecution.id)
                .limit(limit)
            ).all()
        return [
            FailedRun(r.id, r.language, r.error_category, r.created_at, r.code or "", r.stderr or "")
            for r in rows
        ]

    def latest_failure_id(self, user_id: int) -> str | None:
        """The id of the user's latest failed run (what the lessons note is cached by), or None."""
        with self._sm() as s:
            found = s.scalar(
                select(CodeExecution.id)
                .where(CodeExecution.user_id == user_id, CodeExecution.success.is_(False))
                .order_by(CodeExecution.created_at.desc(), CodeExecution.id)
                .limit(1)
            )
        return None if found is None else str(found)

    def recent_failures(
        self, since: datetime, per_user: int, user_id: int | None = None
    ) -> list[RecentFailure]:
        """The latest `per_user` failed runs since `since` of one user, or of every user (one query, at
        start), newest first per user; no code, only the end of stderr."""
        ranked = select(
            CodeExecution.id,
            CodeExecution.user_id,
            CodeExecution.language,
            CodeExecution.error_category,
            _tail(CodeExecution.stderr, STDERR_TAIL_CHARS).label("stderr"),
            CodeExecution.created_at,
            func.row_number()
            .over(
                partition_by=CodeExecution.user_id,
                order_by=(CodeExecution.created_at.desc(), CodeExecution.id),
            )
            .label("n"),
        ).where(
            CodeExecution.success.is_(False),
            CodeExecution.created_at >= since,
            CodeExecution.user_id.is_not(None),
        )
        if user_id is not None:
            ranked = ranked.where(CodeExecution.user_id == user_id)
        sub = ranked.subquery()
        with self._sm() as s:
            rows = s.execute(select(sub).where(sub.c.n <= per_user).order_by(sub.c.user_id, sub.c.n)).all()
        return [RecentFailure(r.id, r.user_id, r.language, r.error_category, r.stderr or "") for r in rows]

    def count(self, user_id: int | None = None) -> int:
        """How many runs are logged (for one user, when given)."""
        with self._sm() as s:
            q = select(func.count()).select_from(CodeExecution)
            if user_id is not None:
                q = q.where(CodeExecution.user_id == user_id)
            return int(s.execute(q).scalar_one())
