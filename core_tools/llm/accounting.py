"""What every LLM request is held to, whichever endpoint it goes to: the user's caps (a reservation before it
is sent) and its row in the LLM-call log (core_tools.llm.chat and core_tools.llm.audio)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

from core_tools.errors import LLMUnavailable
from core_tools.types import LLMReply, UnrecordedCall, Usage
from db.attribution import current_task_run
from db.usage import LLMCallRecord

log = logging.getLogger(__name__)

DeltaCallback = Callable[[str], Awaitable[None]]


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


async def metered(
    send: Callable[[DeltaCallback], Awaitable[LLMReply]],
    *,
    request: bytes,
    model: str,
    purpose: str,
    user_id: int | None,
    session_id: str | None,
    ceiling: int | None,
    budget: BudgetGate | None,
    recorder: LLMCallRecorder | None,
    on_delta: DeltaCallback | None,
    defer_record: bool,
    explain: Callable[[Exception], str],
) -> LLMReply:
    """One chat request held to its user's caps and logged, whoever answers it (the OpenAI-compatible
    client, core_tools.llm.chat, or an in-process model, core_tools.llm.testing): `send(on_text)` makes the
    request, calling `on_text` with the whole text so far as it streams.

    The caps are checked (BudgetExceeded, nothing sent) and the request's estimate (`request`: its JSON, and
    `ceiling` completion tokens) reserved until its usage is recorded. A failed request is recorded with
    `explain(exc)`, the user-readable reason LLMUnavailable is raised with; a stopped (cancelled) one with
    the estimate of what was sent and streamed. A reply that reports no usage gets an estimate. With
    `defer_record` a successful request's record is handed to the caller as `reply.unrecorded`.
    """
    hold: BudgetHold | None = None
    if budget is not None:
        hold = budget.reserve(user_id, purpose, model, estimate_tokens(request), ceiling or 0)
    started = time.monotonic()
    streamed: list[str] = []

    def store(record: LLMCallRecord) -> None:
        store_record(recorder, record)

    def failed(usage: Usage, error: str) -> None:
        store(record_of(user_id, session_id, purpose, model, usage, started, error))

    async def on_text(partial: str) -> None:
        streamed[:] = [partial]
        if on_delta is not None:
            await on_delta(partial)

    try:
        try:
            reply = await send(on_text)
        except asyncio.CancelledError:  # stopped: the stream is closed; what was sent is counted
            sent = estimate_tokens(request)
            failed(Usage(sent, estimate_tokens("".join(streamed)), 0, estimated=True), "stopped")
            raise
        except Exception as exc:
            reason = explain(exc)
            log.warning("LLM request failed (%s): %s", purpose, reason)
            failed(Usage(), reason)
            raise LLMUnavailable(reason) from exc
        if reply.usage.prompt_tokens == 0 and reply.usage.completion_tokens == 0:
            out_text = reply.content + "".join(c.arguments for c in reply.tool_calls)
            reply.usage = Usage(estimate_tokens(request), estimate_tokens(out_text), 0, estimated=True)
        record = record_of(user_id, session_id, purpose, model, reply.usage, started, None)
        if defer_record:
            # The caller stores it (with the turn's answer) and releases the hold after it, with no await
            # in between (see below).
            reply.unrecorded = UnrecordedCall(record, store, hold.release if hold is not None else nothing)
            hold = None
        else:
            store(record)
    finally:
        # Recorded first, released second, with no await in between: the spend is never counted twice or
        # not at all by a parallel request's check.
        if hold is not None:
            hold.release()
    return reply
