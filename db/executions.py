"""The code execution log: every run is a row; /codestats and /codefailures read it."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from db.models import CodeExecution


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

    def count(self, user_id: int | None = None) -> int:
        """How many runs are logged (for one user, when given)."""
        with self._sm() as s:
            q = select(func.count()).select_from(CodeExecution)
            if user_id is not None:
                q = q.where(CodeExecution.user_id == user_id)
            return int(s.execute(q).scalar_one())
