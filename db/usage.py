"""LLM-call and tool-call records: what every run leaves behind."""

from __future__ import annotations

from sqlalchemy.orm import Session, sessionmaker

from db.models import LLMCall, ToolCallLog


class UsageLog:
    """Writes one row per LLM call and per tool call."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sm = sessions

    def record_llm_call(
        self,
        *,
        user_id: int | None,
        session_id: str | None,
        purpose: str,
        model: str,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int,
        tokens_estimated: bool,
        duration_ms: int,
        error: str | None,
    ) -> None:
        """Store one LLM request, successful or not."""
        with self._sm.begin() as s:
            s.add(
                LLMCall(
                    user_id=user_id,
                    session_id=session_id,
                    purpose=purpose,
                    model=model,
                    prompt_tokens=prompt_tokens,
                    completion_tokens=completion_tokens,
                    cached_tokens=cached_tokens,
                    tokens_estimated=tokens_estimated,
                    duration_ms=duration_ms,
                    error=error,
                )
            )

    def record_tool_call(
        self,
        *,
        user_id: int | None,
        session_id: str | None,
        call_id: str,
        tool: str,
        arguments: str,
        ok: bool,
        result: str,
        error: str | None,
        duration_ms: int,
    ) -> None:
        """Store one tool call with its full result."""
        with self._sm.begin() as s:
            s.add(
                ToolCallLog(
                    user_id=user_id,
                    session_id=session_id,
                    call_id=call_id,
                    tool=tool,
                    arguments=arguments,
                    ok=ok,
                    result=result,
                    error=error,
                    duration_ms=duration_ms,
                )
            )
