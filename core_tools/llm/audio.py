"""Transcription and speech through OpenAI-compatible audio endpoints, recorded and budgeted like chat."""

from __future__ import annotations

import logging
import time

from core_tools.errors import MediaError
from core_tools.llm.accounting import BudgetGate, LLMCallRecorder, record_of, store_record
from core_tools.llm.sdk import LazyClient, sdk
from core_tools.types import Usage

log = logging.getLogger(__name__)


def _explain_audio(exc: Exception, what: str, setting: str) -> str:
    """Why a transcription or speech request failed, naming the setting to check."""
    openai = sdk()
    if isinstance(exc, openai.AuthenticationError):
        return f"the {what} endpoint rejected the API key (check {setting}_API_KEY)"
    if isinstance(exc, openai.NotFoundError):
        return f"the {what} endpoint or model was not found (check {setting}_BASE_URL and {setting}_MODEL)"
    if isinstance(exc, openai.APIConnectionError):
        return f"the {what} endpoint could not be reached (check {setting}_BASE_URL)"
    if isinstance(exc, openai.APITimeoutError):
        return f"the {what} endpoint did not answer in time"
    if isinstance(exc, openai.APIStatusError):
        return f"the {what} endpoint answered with an error (HTTP {exc.status_code})"
    return f"the {what} request failed ({type(exc).__name__})"


class AudioClient:
    """Transcription (`/audio/transcriptions`) and speech (`/audio/speech`), recorded and budgeted."""

    def __init__(
        self,
        *,
        base_url: str | None,
        api_key: str,
        model: str,
        tts_base_url: str | None = None,
        tts_api_key: str = "",
        tts_model: str | None = None,
        tts_voice: str = "alloy",
        timeout_s: float = 120.0,
        max_retries: int = 2,
        recorder: LLMCallRecorder | None = None,
        budget: BudgetGate | None = None,
    ) -> None:
        self.model = model
        self.tts_model = tts_model
        self.tts_voice = tts_voice
        self._recorder = recorder
        self.budget = budget
        # The aiohttp transport, like the chat client's; made at the first request (core_tools/llm/sdk.py).
        self._stt = (
            LazyClient(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=max_retries)
            if base_url
            else None
        )
        self._tts = (
            LazyClient(base_url=tts_base_url, api_key=tts_api_key, timeout=timeout_s, max_retries=max_retries)
            if tts_base_url and tts_model
            else None
        )

    @property
    def can_transcribe(self) -> bool:
        """Whether a transcription endpoint is configured."""
        return self._stt is not None

    @property
    def can_speak(self) -> bool:
        """Whether voice answers are configured (TTS_MODEL)."""
        return self._tts is not None

    async def close(self) -> None:
        """Close the HTTP clients."""
        for client in (self._stt, self._tts):
            if client is not None:
                await client.close()

    async def transcribe(
        self,
        data: bytes,
        filename: str,
        duration_s: float,
        *,
        user_id: int | None = None,
        session_id: str | None = None,
    ) -> str:
        """The text of an audio file as delivered (OGG/Opus, MP3, MP4...); MediaError with a reason."""
        if self._stt is None:
            raise MediaError("no transcription endpoint is configured (set TRANSCRIPTION_BASE_URL)")
        seconds = max(1, round(duration_s))
        hold = self.budget.reserve(user_id, "transcribe", self.model, 0, 0, seconds) if self.budget else None
        started = time.monotonic()
        try:
            try:
                result = await self._stt.get().audio.transcriptions.create(
                    model=self.model, file=(filename, data), response_format="json"
                )
            except Exception as exc:
                reason = _explain_audio(exc, "transcription", "TRANSCRIPTION")
                log.warning("transcription failed: %s", reason)
                self._record(user_id, session_id, "transcribe", self.model, 0, 0, started, reason, seconds)
                raise MediaError(reason) from exc
            text = str(getattr(result, "text", "") or "").strip()
            self._record(user_id, session_id, "transcribe", self.model, 0, 0, started, None, seconds)
            return text
        finally:
            if hold is not None:
                hold.release()

    async def speak(self, text: str, *, user_id: int | None = None, session_id: str | None = None) -> bytes:
        """The text as an OGG/Opus voice note; MediaError with a reason."""
        if self._tts is None or self.tts_model is None:
            raise MediaError("voice answers are not configured (set TTS_MODEL)")
        chars = len(text)
        # Speech is priced per input character: the count goes where a chat call's prompt tokens go.
        hold = self.budget.reserve(user_id, "speech", self.tts_model, chars, 0) if self.budget else None
        started = time.monotonic()
        try:
            try:
                response = await self._tts.get().audio.speech.create(
                    model=self.tts_model, voice=self.tts_voice, input=text, response_format="opus"
                )
                audio = await response.aread()
            except Exception as exc:
                reason = _explain_audio(exc, "speech", "TTS")
                log.warning("speech failed: %s", reason)
                self._record(user_id, session_id, "speech", self.tts_model, chars, 0, started, reason, 0)
                raise MediaError(reason) from exc
            self._record(user_id, session_id, "speech", self.tts_model, chars, 0, started, None, 0)
            return audio
        finally:
            if hold is not None:
                hold.release()

    def _record(
        self,
        user_id: int | None,
        session_id: str | None,
        purpose: str,
        model: str,
        prompt: int,
        completion: int,
        started: float,
        error: str | None,
        audio_seconds: int,
    ) -> None:
        usage = Usage(prompt, completion, 0)
        store_record(
            self._recorder,
            record_of(user_id, session_id, purpose, model, usage, started, error, audio_seconds),
        )
