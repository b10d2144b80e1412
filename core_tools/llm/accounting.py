"""What every LLM request is held to, whichever endpoint it goes to: the user's caps (a reservation before it
is sent) and its row in the LLM-call log (core_tools.llm.chat and core_tools.llm.audio)."""

from __future__ import annotations

import logging
import time
from typing import Protocol

from core_tools.types import Usage
from db.attribution import current_task_run
from db.usage import LLMCallRecord

log = logging.getLogger(__name__)


class LLMCallRecorder(Protocol):
    """Where each LLM request is recorded (the database in the app)."""

    def record_llm_call(self, record: LLMCallRecord) -> None: ...


class BudgetHold(Protocol):
    """What one request in flight reserved against its user's caps."""

    def release(self) -> None:
        """Settle: called once the request's real usage is recorded (or it failed)."""


class BudgetGate(Protocol):
    """Refuses a request before it is sent when a usage cap is reached (raises BudgetExceeded)."""

    def check(self, user_id: int | None, purpose: str = "chat") -> None: ...

    def reserve(
        self,
        user_id: int | None,
        purpose: str,
        model: str,
        prompt_tokens: int,
        completion_tokens: int,
        audio_seconds: float = 0,
    ) -> BudgetHold:
        """Refuse (BudgetExceeded) or reserve the request's estimate until it is released."""
        ...


def estimate_tokens(text: str | bytes) -> int:
    """A rough token count (about four characters, or bytes of UTF-8, a token) for servers that report no
    usage."""
    return max(1, len(text) // 4) if text else 0


def nothing() -> None:
    return None


def record_of(
    user_id: int | None,
    session_id: str | None,
    purpose: str,
    model: str,
    usage: Usage,
    started: float,
    error: str | None,
    audio_seconds: int = 0,
) -> LLMCallRecord:
    """The LLM-call log's row of a request (chat, transcription and speech alike), attributed to the
    scheduled task run it is made for (db/attribution.py) here, where the request is made."""
    run = current_task_run()
    return LLMCallRecord(
        user_id=user_id,
        session_id=session_id,
        purpose=purpose,
        model=model,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        cached_tokens=usage.cached_tokens,
        tokens_estimated=usage.estimated,
        duration_ms=int((time.monotonic() - started) * 1000),
        error=error,
        audio_seconds=audio_seconds,
        schedule_id=run.schedule_id if run is not None else None,
        firing_id=run.firing_id if run is not None else None,
    )


def store_record(recorder: LLMCallRecorder | None, record: LLMCallRecord) -> None:
    """Write one row of the LLM-call log; a failing write is only logged."""
    if recorder is None:
        return
    try:
        recorder.record_llm_call(record)
    except Exception:
        log.exception("could not record an LLM call (%s)", record.purpose)
