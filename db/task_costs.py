"""What scheduled tasks spent: LLM-call sums per task in a window and per run (firing), from `llm_calls`.

The calls are attributed when they are recorded (db/attribution.py); costs are priced at read time by
core_tools.usage, like every other figure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from db.models import LLMCall
from db.usage import ModelUsage, usage_of, usage_sums

PURPOSE = "scheduled"  # what the sums are labelled as (they may hold a task's "final" calls too)


@dataclass(frozen=True)
class RunUsage:
    """The LLM calls of one task run (firing), summed per model."""

    firing_id: int
    schedule_id: int
    rows: list[ModelUsage]


def _sums() -> tuple[Any, ...]:
    """The model and ModelUsage's sums (db/usage.py's: a request the user stopped is not a failure)."""
    return (LLMCall.model, *usage_sums())


# The sums of task runs (firings) per model, filtered by the caller.
_RUN_SUMS = select(LLMCall.firing_id, LLMCall.schedule_id, *_sums()).group_by(
    LLMCall.firing_id, LLMCall.schedule_id, LLMCall.model
)


class TaskCosts:
    """Reads the LLM-call sums of scheduled tasks."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sm = sessions

    def usage_by_task(
        self, schedule_ids: Sequence[int], since: datetime, until: datetime
    ) -> dict[int, list[ModelUsage]]:
        """Per task, its calls in [since, until) summed per model (tasks without calls are left out)."""
        if not schedule_ids:
            return {}
        q = (
            select(LLMCall.schedule_id, *_sums())
            .where(
                LLMCall.schedule_id.in_(list(schedule_ids)),
                LLMCall.created_at >= since,
                LLMCall.created_at < until,
            )
            .group_by(LLMCall.schedule_id, LLMCall.model)
        )
        out: dict[int, list[ModelUsage]] = {}
        with self._sm() as s:
            for r in s.execute(q):
                out.setdefault(int(r.schedule_id), []).append(usage_of(r, PURPOSE))
        return out

    def recent_runs(
        self,
        *,
        user_id: int,
        since: datetime,
        limit: int,
        schedule_id: int | None = None,
        exclude_firing: int | None = None,
    ) -> list[RunUsage]:
        """The user's (or one task's) latest runs since `since` that made LLM calls, newest first."""
        latest = (
            select(LLMCall.firing_id)
            .where(LLMCall.user_id == user_id, LLMCall.firing_id.is_not(None), LLMCall.created_at >= since)
            .group_by(LLMCall.firing_id)
            .order_by(func.max(LLMCall.id).desc())
            .limit(limit)
        )
        if schedule_id is not None:
            latest = latest.where(LLMCall.schedule_id == schedule_id)
        if exclude_firing is not None:
            latest = latest.where(LLMCall.firing_id != exclude_firing)
        with self._sm() as s:
            ids = [int(v) for v in s.scalars(latest) if v is not None]
            if not ids:
                return []
            q = _RUN_SUMS.where(LLMCall.firing_id.in_(ids))
            runs: dict[int, RunUsage] = {}
            for r in s.execute(q):
                run = runs.setdefault(int(r.firing_id), RunUsage(int(r.firing_id), int(r.schedule_id), []))
                run.rows.append(usage_of(r, PURPOSE))
        return [runs[i] for i in ids if i in runs]

    def run(self, firing_id: int) -> RunUsage | None:
        """The calls of one run, or None when it made none."""
        q = _RUN_SUMS.where(LLMCall.firing_id == firing_id)
        with self._sm() as s:
            rows = s.execute(q).all()
        if not rows:
            return None
        return RunUsage(firing_id, int(rows[0].schedule_id), [usage_of(r, PURPOSE) for r in rows])
