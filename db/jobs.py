"""Background code jobs as rows: `status` answers from here, before and after a restart."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from db.models import CodeJob, utcnow


@dataclass(frozen=True)
class JobRow:
    """One job as stored."""

    id: str
    user_id: int
    chat_id: int
    task: str
    runner: str
    status: str
    result: dict[str, Any] | None
    created_at: datetime
    finished_at: datetime | None


def _row(j: CodeJob) -> JobRow:
    return JobRow(
        j.id, j.user_id, j.chat_id, j.task, j.runner, j.status, j.result, j.created_at, j.finished_at
    )


class Jobs:
    """Writes and reads `code_jobs`."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sm = sessions

    def started(
        self,
        job_id: str,
        *,
        user_id: int,
        chat_id: int,
        session_id: str | None,
        task: str,
        language: str,
        runner: str,
    ) -> None:
        """Record a job that went to the background."""
        with self._sm.begin() as s:
            s.add(
                CodeJob(
                    id=job_id,
                    user_id=user_id,
                    chat_id=chat_id,
                    session_id=session_id,
                    task=task,
                    language=language,
                    status="running",
                    runner=runner,
                )
            )

    def finished(self, job_id: str, status: str, result: dict[str, Any] | None) -> None:
        """Record a job's end (done, failed, cancelled)."""
        with self._sm.begin() as s:
            s.execute(
                update(CodeJob)
                .where(CodeJob.id == job_id)
                .values(status=status, result=result, finished_at=utcnow())
            )

    def get(self, job_id: str, user_id: int) -> JobRow | None:
        """One of the user's jobs, or None."""
        with self._sm() as s:
            row = s.execute(select(CodeJob).where(CodeJob.id == job_id, CodeJob.user_id == user_id)).scalar()
            return None if row is None else _row(row)

    def running(self) -> list[JobRow]:
        """Every job recorded as running, by any process."""
        with self._sm() as s:
            return [_row(r) for r in s.execute(select(CodeJob).where(CodeJob.status == "running")).scalars()]

    def interrupt(self, job_ids: list[str], reason: str) -> None:
        """Mark jobs whose process ended while they ran as interrupted."""
        if not job_ids:
            return
        with self._sm.begin() as s:
            s.execute(
                update(CodeJob)
                .where(CodeJob.id.in_(job_ids), CodeJob.status == "running")
                .values(status="interrupted", result={"error": reason}, finished_at=utcnow())
            )
