"""Time series for the charts: one user's LLM calls and code runs in a window, one lean row each.

Bucketing by the user's local day (or hour) is done by the caller: a local day's bounds depend on the zone
and its DST changes, which SQLite and PostgreSQL would each express differently. The rows are plain tuples
from one Core select over the (user_id, created_at) indexes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from db.models import CodeExecution, LLMCall


@dataclass(frozen=True)
class CallPoint:
    """One LLM call: when, what for, which model, how many tokens."""

    at: datetime
    purpose: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    audio_seconds: int


@dataclass(frozen=True)
class RunPoint:
    """One code run: when, whether it succeeded, its error category."""

    at: datetime
    success: bool
    error_category: str | None


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


class Series:
    """Reads the rows the /usage and /codestats charts (and the Mini App's) are drawn from."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sm = sessions

    def llm_calls(self, user_id: int, since: datetime, until: datetime) -> list[CallPoint]:
        """The user's LLM calls in [since, until), oldest first."""
        q = (
            select(
                LLMCall.created_at,
                LLMCall.purpose,
                LLMCall.model,
                LLMCall.prompt_tokens,
                LLMCall.completion_tokens,
                LLMCall.cached_tokens,
                LLMCall.audio_seconds,
            )
            .where(LLMCall.user_id == user_id, LLMCall.created_at >= since, LLMCall.created_at < until)
            .order_by(LLMCall.created_at)
        )
        with self._sm() as s:
            return [
                CallPoint(
                    _aware(r.created_at),
                    str(r.purpose),
                    str(r.model),
                    int(r.prompt_tokens),
                    int(r.completion_tokens),
                    int(r.cached_tokens),
                    int(r.audio_seconds or 0),
                )
                for r in s.execute(q)
            ]

    def code_runs(self, user_id: int, since: datetime, until: datetime) -> list[RunPoint]:
        """The user's code runs in [since, until), oldest first."""
        q = (
            select(CodeExecution.created_at, CodeExecution.success, CodeExecution.error_category)
            .where(
                CodeExecution.user_id == user_id,
                CodeExecution.created_at >= since,
                CodeExecution.created_at < until,
            )
            .order_by(CodeExecution.created_at)
        )
        with self._sm() as s:
            return [RunPoint(_aware(r.created_at), bool(r.success), r.error_category) for r in s.execute(q)]
