"""Streaming chat completions with tools, retries and accounting, from any OpenAI-compatible endpoint."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

import orjson

from core_tools.errors import LLMUnavailable
from core_tools.llm.accounting import BudgetGate, DeltaCallback, LLMCallRecorder, metered
from core_tools.llm.sdk import LazyClient, sdk
from core_tools.types import ChatMessage, LLMReply, ToolCallRequest, Usage

log = logging.getLogger(__name__)

BACKGROUND_PURPOSES = frozenset({"summary"})  # calls nobody waits on: they use the background model


def _connect_failed(exc: BaseException) -> bool:
    """Whether a socket error (refused, unreachable, DNS...) is behind `exc`, not a timeout.

    The SDK's aiohttp transport maps every failed connect to a connect *timeout*, so a stopped server would
    read "did not answer in time"; the OSError it chains says what happened.
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and not isinstance(seen, TimeoutError):
            return True
        seen = seen.__cause__
    return False


def _encoded(m: ChatMessage) -> orjson.Fragment:
    """A message's JSON, made once per message (kept on it: ChatMessage.encoded)."""
    if m.encoded is None:
        m.encoded = orjson.Fragment(orjson.dumps(m.to_openai()))
    encoded: orjson.Fragment = m.encoded
    return encoded


def _request_body(
    payload: list[orjson.Fragment], tools: list[dict[str, Any]] | None, model: str, ceiling: int | None
) -> bytes:
    """The JSON of a streamed chat completion request, UTF-8 encoded (orjson: a turn's request with its
    history and tool schemas took the stdlib's encoder about 0.1 ms, bench/bench_chat.py)."""
    body: dict[str, Any] = {
        "model": model,
        "messages": payload,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if ceiling:
        body["max_completion_tokens"] = ceiling
    if tools:
        body["tools"] = tools
    return orjson.dumps(body)


def _without_images(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    return [replace(m, images=()) if m.images else m for m in messages]


def _explain(exc: Exception) -> str:
    """A short, secret-free reason a user can read."""
    openai = sdk()
    if isinstance(exc, openai.AuthenticationError):
        return "the language model rejected the API key (check OPENAI_API_KEY)"
    if isinstance(exc, openai.RateLimitError):
        return "the language model is rate-limiting requests"
    if isinstance(exc, openai.APIConnectionError) and _connect_failed(exc):
        return "the language model could not be reached"
    if isinstance(exc, openai.APITimeoutError):
        return "the language model did not answer in time"
    if isinstance(exc, openai.APIConnectionError):
        return "the language model could not be reached"
    if isinstance(exc, openai.NotFoundError):
        return "the language model endpoint or model was not found (check OPENAI_BASE_URL and LLM_MODEL)"
    if isinstance(exc, openai.APIStatusError):
        return f"the language model answered with an error (HTTP {exc.status_code})"
    return f"the language model call failed ({type(exc).__name__})"


class LLMClient:
    """Streams chat completions from any OpenAI-compatible endpoint; every request passes `complete`."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str,
        model: str,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        recorder: LLMCallRecorder | None = None,
        budget: BudgetGate | None = None,
        max_completion_tokens: int | None = None,
        background_model: str | None = None,
        vision: str = "auto",
    ) -> None:
        # The SDK retries 408/409/429/5xx and connection errors with exponential backoff. Its aiohttp
        # transport (the `openai[aiohttp]` extra) costs about a third less CPU per streamed request than the
        # default httpx one, which shows when many chats stream at once (bench/bench_chat.py). Made, and
        # the SDK imported, at the first request (core_tools/llm/sdk.py).
        self._sdk = LazyClient(base_url=base_url, api_key=api_key, timeout=timeout_s, max_retries=max_retries)
        self.model = model
        # For background calls (session summaries): LLM_SUMMARY_MODEL, or the default model.
        self.background_model = background_model or model
        self._recorder = recorder
        self.budget = budget
        # Sent with every request, and reserved against the user's caps before it is sent: the bound that
        # makes "overshoot at most one request" hold for parallel calls. None: not sent, nothing reserved
        # for the completion.
        self.max_completion_tokens = max_completion_tokens
        # LLM_VISION: "on" always sends images, "off" never does, "auto" sends them until the endpoint
        # rejects image input once; that answer is remembered for the life of the process.
        self.vision = vision
        self.sees_images: bool | None = {"on": True, "off": False}.get(vision)

    async def close(self) -> None:
        """Close the HTTP client."""
        await self._sdk.close()

    async def check(self) -> str:
        """Reach the endpoint without spending tokens (GET /models); raises LLMUnavailable with a reason."""
        openai = sdk()
        try:
            page = await self._sdk.get().models.list()
        except openai.NotFoundError:
            return "reachable (it does not list models)"
        except Exception as exc:
            raise LLMUnavailable(_explain(exc)) from exc
        names = [m.id for m in page.data]
        if names and self.model not in names:
            return f"reachable, but it does not list the model {self.model!r} ({len(names)} models listed)"
        return f"reachable, model {self.model!r}" + (" listed" if names else "")

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: list[dict[str, Any]] | None = None,
        on_delta: DeltaCallback | None = None,
        purpose: str = "chat",
        user_id: int | None = None,
        session_id: str | None = None,
        model: str | None = None,
        defer_record: bool = False,
        max_completion_tokens: int | None = None,
    ) -> LLMReply:
        """Send one streamed request; raise LLMUnavailable (with a user-readable reason) when it fails.

        `model` is the chat's choice; without it a background purpose (a summary) uses the background
        model (LLM_SUMMARY_MODEL) and everything else the default model.

        Raises BudgetExceeded, before anything is sent, when the user's caps (counting requests in flight)
        are reached; otherwise the request's estimate is reserved until its real usage is recorded.
        `defer_record`: a successful request's record is not written here but handed to the caller as
        `reply.unrecorded`, which must settle it (stored with the caller's rows, or alone); a failed or
        stopped request is recorded here either way. `max_completion_tokens`: this request's ceiling
        instead of the client's (a helper agent's `max_tokens`), sent and reserved the same way.
        """
        ceiling = max_completion_tokens or self.max_completion_tokens
        model = model or (self.background_model if purpose in BACKGROUND_PURPOSES else self.model)
        has_images = any(m.images for m in messages)
        dropped = has_images and self.sees_images is False
        payload = [_encoded(m) for m in (_without_images(messages) if dropped else messages)]
        # One JSON text of the request: sent as it is, and the rough size its reservation is counted from.
        request = _request_body(payload, tools, model, ceiling)
        openai = sdk()

        async def send(on_text: DeltaCallback) -> LLMReply:
            nonlocal dropped
            try:
                reply = await self._stream(request, on_text, model)
            except openai.BadRequestError:
                if not has_images or dropped or self.vision != "auto":
                    raise
                # The endpoint refuses image input: remember it and send the text (captions) alone.
                log.warning("the LLM endpoint rejected image input; images are left out from now on")
                self.sees_images, dropped = False, True
                payload = [_encoded(m) for m in _without_images(messages)]
                reply = await self._stream(_request_body(payload, tools, model, ceiling), on_text, model)
            if has_images and not dropped:
                self.sees_images = True
            reply.images_dropped = dropped
            return reply

        def explain(exc: Exception) -> str:
            if has_images and not dropped and isinstance(exc, openai.BadRequestError):
                return (
                    "the language model rejected the image (it may not accept image input; "
                    "set LLM_VISION=auto or off, or use a model that sees images)"
                )
            return _explain(exc)

        return await metered(
            send,
            request=request,
            model=model,
            purpose=purpose,
            user_id=user_id,
            session_id=session_id,
            ceiling=ceiling,
            budget=self.budget,
            recorder=self._recorder,
            on_delta=on_delta,
            defer_record=defer_record,
            explain=explain,
        )

    async def _stream(self, request: bytes, on_delta: DeltaCallback | None, model: str) -> LLMReply:
        # The SDK's own request path (retries, status errors, the stream's SSE decoding, its error events
        # and timeouts) with a body of our own (`content`, the SDK's documented way): its parameter
        # transform walks every message against its TypedDicts, which measured 39 ms per request at 100
        # messages (bench/bench_chat.py), more than everything else in a turn. Each chunk stays the JSON
        # object it arrived as (`object`: no conversion at all): building the SDK's pydantic models of the
        # chunks took more CPU than the rest of a short turn's own work.
        stream = await self._sdk.get().post(
            "/chat/completions",
            cast_to=object,
            content=request,
            stream=True,
            stream_cls=sdk().AsyncStream[object],
        )
        try:
            return await self._read(stream, on_delta, model)
        finally:
            # Closed at once when the turn is stopped (cancelled) too: the server sees the connection go.
            await stream.close()

    @staticmethod
    async def _read(stream: AsyncIterator[object], on_delta: DeltaCallback | None, model: str) -> LLMReply:
        """Collect a streamed completion from its chunks (plain JSON objects, read defensively: any
        OpenAI-compatible server may leave fields out or send null)."""
        content: list[str] = []
        calls: dict[int, dict[str, Any]] = {}
        usage = Usage()
        finish: str | None = None
        async for chunk in stream:
            if not isinstance(chunk, dict):
                continue
            used = chunk.get("usage")
            if isinstance(used, dict):
                details = used.get("prompt_tokens_details")
                cached = int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0
                usage = Usage(
                    int(used.get("prompt_tokens") or 0), int(used.get("completion_tokens") or 0), cached
                )
            for choice in chunk.get("choices") or ():
                if not isinstance(choice, dict):
                    continue
                if choice.get("finish_reason"):
                    finish = str(choice["finish_reason"])
                delta = choice.get("delta")
                if not isinstance(delta, dict):
                    continue
                text = delta.get("content")
                if text and isinstance(text, str):
                    content.append(text)
                    if on_delta is not None:
                        await on_delta("".join(content))
                for tc in delta.get("tool_calls") or ():
                    if not isinstance(tc, dict):
                        continue
                    index = tc.get("index")
                    # Without an index (a server that leaves it out): the call being streamed goes on.
                    key = index if isinstance(index, int) else max(calls, default=0)
                    slot = calls.setdefault(key, {"id": "", "name": "", "arguments": ""})
                    if tc.get("id"):
                        slot["id"] = str(tc["id"])
                    fn = tc.get("function")
                    if isinstance(fn, dict):
                        if fn.get("name"):
                            slot["name"] += str(fn["name"])
                        if fn.get("arguments"):
                            slot["arguments"] += str(fn["arguments"])
        tool_calls = [
            ToolCallRequest(c["id"] or f"call_{i}", c["name"], c["arguments"])
            for i, c in sorted(calls.items())
        ]
        return LLMReply("".join(content), tool_calls, usage, finish, model)
