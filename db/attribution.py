"""Which scheduled task run the work in this context is for: its LLM calls are recorded against it.

The bot sets it around a task's turn (`running_task`); every LLM call made in that context (the turn's own
requests, a tool's, an embedding, a background job the turn started) is stored with the task's schedule and
firing ids (`llm_calls.schedule_id`, `firing_id`), and the budget gate holds it against the task's monthly
limit. A context variable, so it follows the turn into its tasks and worker threads (asyncio copies the
context into both) and nothing else: two tasks running at once, or a chat turn beside them, never mix.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass


@dataclass(frozen=True)
class TaskRun:
    """One run (firing) of a scheduled task, and its monthly limit at the time it started."""

    user_id: int
    schedule_id: int
    firing_id: int
    max_cost_per_month: float | None = None  # USD; None: no limit of its own


_CURRENT: ContextVar[TaskRun | None] = ContextVar("task_run", default=None)
_NONE: dict[str, int | None] = {"schedule_id": None, "firing_id": None}


def current_task_run() -> TaskRun | None:
    """The task run the current context works for, if any."""
    return _CURRENT.get()


@contextmanager
def running_task(run: TaskRun) -> Iterator[None]:
    """Attribute the work done inside the block (and the tasks and threads it starts) to `run`."""
    token = _CURRENT.set(run)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def task_run_columns() -> dict[str, int | None]:
    """The llm_calls columns that attribute a call to the current task run (both None outside one)."""
    run = _CURRENT.get()
    return _NONE if run is None else {"schedule_id": run.schedule_id, "firing_id": run.firing_id}
