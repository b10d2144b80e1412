"""A loopback fake of an OpenAI-compatible server that the real ``openai`` client talks to over HTTP.

Usage::

    async with FakeLLM() as llm:
        llm.script(text("Hello **world**"), tool_calls(call("search", {"q": "x"})))
        client = openai.AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0)
        ...

Each ``POST /v1/chat/completions`` consumes one scripted step (or ``llm.default`` when the script is empty).
Streaming replies are SSE ``chat.completion.chunk`` objects shaped like OpenAI's, ending in ``data: [DONE]``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import inspect
import itertools
import json
import math
import struct
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Self

import orjson
from aiohttp import web

__all__ = [
    "ErrorStep",
    "FakeLLM",
    "HangStep",
    "Responder",
    "Step",
    "StreamErrorStep",
    "TextStep",
    "ToolCall",
    "ToolCallsStep",
    "call",
    "error",
    "estimate_tokens",
    "fake_embedding",
    "hang",
    "last_user_text",
    "stream_error",
    "text",
    "tool_calls",
]

JsonDict = dict[str, Any]


def last_user_text(request: JsonDict) -> str:
    """The content of the last user message of a chat request ("" without one): what a responder answers
    by, so a reply cannot go to whichever request happens to come first."""
    users = [m for m in request["messages"] if m["role"] == "user"]
    return str(users[-1]["content"]) if users else ""


def estimate_tokens(value: Any) -> int:
    """A crude token estimate: about four characters of (JSON-encoded) text per token, at least 1."""
    raw = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return max(1, math.ceil(len(raw) / 4))


@dataclass
class TextStep:
    """Reply with assistant text, streamed in ``chunk_size``-character content deltas."""

    content: str
    chunk_size: int = 5
    usage: bool = True
    delay: float = 0.0
    chunk_delay: float = 0.0
    finish_reason: str = "stop"
    reasoning: str | None = None
    # Set: after ``content`` the stream stays open (the turn is still running) until this event is set, the
    # client goes away or the server closes; what a test does "during a turn" then cannot race its end.
    hold: asyncio.Event | None = None


@dataclass
class ToolCall:
    """One function tool call in a ToolCallsStep; ``arguments`` is sent verbatim."""

    name: str
    arguments: str
    id: str | None = None


@dataclass
class ToolCallsStep:
    """Reply with tool calls, streamed as OpenAI does (header delta, then argument fragments)."""

    calls: list[ToolCall]
    content: str | None = None
    usage: bool = True
    delay: float = 0.0
    chunk_delay: float = 0.0
    fragments: int = 3


@dataclass
class ErrorStep:
    """Reply with an HTTP error and an OpenAI-style error JSON body."""

    status: int = 500
    body: JsonDict | str | None = None
    headers: dict[str, str] | None = None


@dataclass
class HangStep:
    """Accept the request and stall ``seconds`` (after streaming ``partial`` text, if given), then drop it."""

    seconds: float
    partial: str | None = None


@dataclass
class StreamErrorStep:
    """Stream ``partial`` text, then an in-stream ``{"error": ...}`` event (the SDK raises APIError)."""

    partial: str = ""
    message: str = "The server had an error while processing your request."


Step = TextStep | ToolCallsStep | ErrorStep | HangStep | StreamErrorStep
Responder = Callable[[JsonDict], "Step | Awaitable[Step]"]
ScriptItem = Step | Responder


def text(
    content: str,
    chunk_size: int = 5,
    usage: bool = True,
    delay: float = 0.0,
    chunk_delay: float = 0.0,
    finish_reason: str = "stop",
    reasoning: str | None = None,
    hold: asyncio.Event | None = None,
) -> TextStep:
    """A text reply (``reasoning`` is streamed first as ``reasoning_content`` deltas, like vLLM/DeepSeek;
    ``hold``: the stream ends only once that event is set, see TextStep)."""
    return TextStep(content, chunk_size, usage, delay, chunk_delay, finish_reason, reasoning, hold)


def call(name: str, args: JsonDict | str | None = None, id: str | None = None) -> ToolCall:
    """A tool call: dict ``args`` are JSON-encoded, a str is sent as is (e.g. to test broken JSON)."""
    arguments = args if isinstance(args, str) else json.dumps(args or {})
    return ToolCall(name, arguments, id)


def tool_calls(
    *calls: ToolCall,
    content: str | None = None,
    usage: bool = True,
    delay: float = 0.0,
    chunk_delay: float = 0.0,
) -> ToolCallsStep:
    """A reply made of one or more tool calls (optionally preceded by assistant ``content``)."""
    return ToolCallsStep(list(calls), content, usage, delay, chunk_delay)


def error(
    status: int = 500, body: JsonDict | str | None = None, headers: dict[str, str] | None = None
) -> ErrorStep:
    """An HTTP error reply, e.g. ``error(429, headers={"retry-after": "1"})``."""
    return ErrorStep(status, body, headers)


def hang(seconds: float, partial: str | None = None) -> HangStep:
    """Stall the request for ``seconds`` then close the connection (``partial``: stall mid-stream)."""
    return HangStep(seconds, partial)


def stream_error(
    partial: str = "", message: str = "The server had an error while processing your request."
) -> StreamErrorStep:
    """Stream some text, then an error event inside the SSE stream."""
    return StreamErrorStep(partial, message)


_ERROR_TYPES = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    403: ("permission_denied", None),
    404: ("invalid_request_error", "model_not_found"),
    429: ("rate_limit_exceeded", "rate_limit_exceeded"),
}


def _error_body(status: int) -> JsonDict:
    kind, code = _ERROR_TYPES.get(status, ("server_error", None))
    return {"error": {"message": f"Fake LLM error {status}", "type": kind, "param": None, "code": code}}


def fake_embedding(value: str, dim: int) -> list[float]:
    """A deterministic unit vector of ``dim`` floats derived from the SHA-256 of ``value``."""
    out: list[float] = []
    for block in itertools.count():
        digest = hashlib.sha256(f"{block}:{value}".encode()).digest()
        out.extend((b - 127.5) / 127.5 for b in digest)
        if len(out) >= dim:
            break
    vec = out[:dim]
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / norm for x in vec]


class FakeLLM:
    """Loopback OpenAI-compatible server with scripted chat completions, models and embeddings."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        models: list[str] | None = None,
        embedding_dim: int = 16,
    ) -> None:
        self.host = host
        self.port = 0
        self.models = models or ["fake-model", "fake-embedding"]
        self.embedding_dim = embedding_dim
        self.default: ScriptItem = text("ok")
        self.delay = 0.0
        self.requests: list[JsonDict] = []
        self.request_headers: list[dict[str, str]] = []
        self.embedding_requests: list[JsonDict] = []
        # Audio: what /audio/transcriptions answers (text, or an HTTP status), and what it and
        # /audio/speech received ({"model", "filename", "bytes"} / the JSON body).
        self.transcript = "hello from a voice note"
        self.transcription_status = 200
        self.transcription_delay = 0.0  # seconds /audio/transcriptions waits before it answers
        self.transcription_requests: list[JsonDict] = []
        self.speech_requests: list[JsonDict] = []
        self.speech_audio = b"OggS\x00\x02fake-opus-voice"
        # Vision: True makes chat requests with image_url parts fail with a 400, like a text-only model.
        self.reject_images = False
        self.active = 0
        self.max_active = 0
        self.disconnects = 0  # streams the client closed before their end
        self._held: set[asyncio.Event] = set()  # the `hold` events of the streams held open right now
        self._script: list[ScriptItem] = []
        self._ids = itertools.count(1)
        self._call_ids = itertools.count(1)
        self._changed = asyncio.Event()
        self._closing = asyncio.Event()
        self._runner: web.AppRunner | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def base_url(self) -> str:
        """The ``base_url`` for ``openai.AsyncOpenAI``."""
        return f"http://{self.host}:{self.port}/v1"

    async def start(self) -> None:
        """Start the HTTP server on an ephemeral port of ``host``."""
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/embeddings", self._embeddings)
        app.router.add_post("/v1/audio/transcriptions", self._transcriptions)
        app.router.add_post("/v1/audio/speech", self._speech)
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, 0, backlog=512)
        await site.start()
        self.port = int(runner.addresses[0][1])
        self._runner = runner

    async def close(self) -> None:
        """Interrupt hanging/delayed requests and stop the server."""
        self._closing.set()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ------------------------------------------------------------------ scripting and inspection

    def script(self, *steps: ScriptItem) -> None:
        """Append steps (or ``responder(request_json) -> step`` callables), consumed one per request."""
        self._script.extend(steps)

    @property
    def pending(self) -> int:
        """How many scripted steps have not been consumed yet."""
        return len(self._script)

    async def wait_for_requests(self, n: int, timeout: float = 60.0) -> list[JsonDict]:
        """Wait until at least ``n`` chat-completion requests arrived; returns all recorded requests."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(self.requests) < n:
            remaining = deadline - loop.time()
            if remaining <= 0:
                models = [r.get("model") for r in self.requests]
                raise AssertionError(
                    f"timed out after {timeout}s waiting for {n} chat requests; got {len(self.requests)} "
                    f"(models {models}), {self.pending} scripted step(s) left"
                )
            event = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), timeout=min(remaining, 0.5))
        return list(self.requests)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _sleep(self, seconds: float) -> None:
        if seconds <= 0:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._closing.wait(), timeout=seconds)

    async def _next_step(self, body: JsonDict) -> Step:
        item: ScriptItem = self._script.pop(0) if self._script else self.default
        while callable(item):
            produced = item(body)
            item = await produced if inspect.isawaitable(produced) else produced
        return item

    # ------------------------------------------------------------------ handlers

    async def _models(self, request: web.Request) -> web.Response:
        data = [
            {"id": m, "object": "model", "created": 1_700_000_000, "owned_by": "fake"} for m in self.models
        ]
        return web.json_response({"object": "list", "data": data})

    async def _embeddings(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.embedding_requests.append(body)
        raw = body.get("input")
        inputs: list[Any] = [raw] if isinstance(raw, str) or (raw and isinstance(raw[0], int)) else list(raw)
        dim = int(body.get("dimensions") or self.embedding_dim)
        as_b64 = body.get("encoding_format") == "base64"
        data = []
        for idx, item in enumerate(inputs):
            vec = fake_embedding(item if isinstance(item, str) else json.dumps(item), dim)
            emb: Any = base64.b64encode(struct.pack(f"<{dim}f", *vec)).decode() if as_b64 else vec
            data.append({"object": "embedding", "index": idx, "embedding": emb})
        tokens = sum(estimate_tokens(i) for i in inputs)
        return web.json_response(
            {
                "object": "list",
                "data": data,
                "model": body.get("model", "fake-embedding"),
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    async def _transcriptions(self, request: web.Request) -> web.Response:
        post = await request.post()
        upload = post.get("file")
        record: JsonDict = {"model": post.get("model"), "response_format": post.get("response_format")}
        if isinstance(upload, web.FileField):
            record.update(
                filename=upload.filename, bytes=upload.file.read(), content_type=upload.content_type
            )
        self.transcription_requests.append(record)
        self._notify()
        await self._sleep(self.transcription_delay)
        if self.transcription_status != 200:
            return web.json_response(_error_body(self.transcription_status), status=self.transcription_status)
        return web.json_response({"text": self.transcript})

    async def _speech(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.speech_requests.append(body)
        self._notify()
        return web.Response(body=self.speech_audio, content_type="audio/ogg")

    @staticmethod
    def _has_images(body: JsonDict) -> bool:
        for message in body.get("messages") or []:
            content = message.get("content")
            if isinstance(content, list) and any(p.get("type") == "image_url" for p in content):
                return True
        return False

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        # orjson, and the prompt counted from the body's size: this server runs on the bot's own thread in
        # the tests and benches, and what a real provider spends on a request (parsing it, counting its
        # tokens) must not be charged to the bot's turn in proportion to its history (bench/bench_chat.py).
        body = orjson.loads(raw)
        prompt = estimate_tokens(raw.decode())
        self.requests.append(body)
        self.request_headers.append(dict(request.headers))
        self._notify()
        if self.reject_images and self._has_images(body):
            # What a text-only model behind an OpenAI-compatible server answers.
            error = {
                "message": "Invalid content type. image_url is only supported by certain models.",
                "type": "invalid_request_error",
                "param": "messages",
                "code": None,
            }
            return web.json_response({"error": error}, status=400)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        try:
            await self._sleep(self.delay)
            step = await self._next_step(body)
            return await self._reply(request, body, step, prompt)
        finally:
            self.active -= 1

    async def _reply(
        self, request: web.Request, body: JsonDict, step: Step, prompt: int
    ) -> web.StreamResponse:
        if isinstance(step, ErrorStep):
            payload = step.body if step.body is not None else _error_body(step.status)
            headers = dict(step.headers or {})
            if isinstance(payload, str):
                return web.Response(status=step.status, text=payload, headers=headers)
            return web.json_response(payload, status=step.status, headers=headers)
        if isinstance(step, HangStep) and step.partial is None:
            await self._sleep(step.seconds)
            return self._drop(request)
        if isinstance(step, TextStep | ToolCallsStep):
            await self._sleep(step.delay)
        if not body.get("stream"):
            if isinstance(step, HangStep | StreamErrorStep):
                return web.json_response(_error_body(500), status=500)
            return web.json_response(self._completion(body, step, prompt))
        return await self._stream(request, body, step, prompt)

    @staticmethod
    def _drop(request: web.Request) -> web.StreamResponse:
        if request.transport is not None:
            request.transport.close()
        return web.Response(status=499)

    @staticmethod
    def _usage(prompt: int, output: Any) -> JsonDict:
        completion = estimate_tokens(output) if output else 0
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def _call_id(self, tc: ToolCall) -> str:
        if tc.id is None:
            tc.id = f"call_{next(self._call_ids)}"
        return tc.id

    def _completion(self, body: JsonDict, step: TextStep | ToolCallsStep, prompt: int) -> JsonDict:
        message: JsonDict = {"role": "assistant", "content": step.content, "refusal": None}
        if isinstance(step, ToolCallsStep):
            message["tool_calls"] = [
                {
                    "id": self._call_id(tc),
                    "type": "function",
                    "function": {"name": tc.name, "arguments": tc.arguments},
                }
                for tc in step.calls
            ]
            finish = "tool_calls"
            output: Any = [step.content or "", *[(tc.name, tc.arguments) for tc in step.calls]]
        else:
            if step.reasoning:
                message["reasoning_content"] = step.reasoning
            finish = step.finish_reason
            output = step.content
        reply: JsonDict = {
            "id": f"chatcmpl-{next(self._ids)}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body.get("model", "fake-model"),
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        }
        if step.usage:
            reply["usage"] = self._usage(prompt, output)
        return reply

    async def _stream(
        self, request: web.Request, body: JsonDict, step: Step, prompt: int
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        cid = f"chatcmpl-{next(self._ids)}"
        created = int(time.time())
        model = body.get("model", "fake-model")

        def chunk(
            delta: JsonDict | None, finish: str | None = None, usage: JsonDict | None = None
        ) -> JsonDict:
            choices = (
                []
                if delta is None
                else [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]
            )
            obj: JsonDict = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": "fp_fake",
                "choices": choices,
            }
            if usage is not None:
                obj["usage"] = usage
            return obj

        async def send(obj: JsonDict | str, pause: float = 0.0) -> None:
            data = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
            await resp.write(f"data: {data}\n\n".encode())
            await self._sleep(pause)

        async def send_text(content: str, size: int, pause: float, key: str = "content") -> None:
            size = max(size, 1)
            for i in range(0, len(content), size):
                await send(chunk({key: content[i : i + size]}), pause)

        try:
            await resp.prepare(request)  # a client gone before the first byte counts as a disconnect too
            return await self._stream_steps(resp, request, body, step, prompt, chunk, send, send_text)
        except (ConnectionResetError, ConnectionError):
            self.disconnects += 1  # the client closed the stream before its end (a stopped turn)
            self._notify()
        return resp

    async def _hold_open(self, resp: web.StreamResponse, until: asyncio.Event) -> None:
        """Keep a stream open until `until` is set or the server closes. An SSE comment (which clients
        ignore) every 0.1 s finds out a client that went away: the write raises ConnectionResetError."""
        self._held.add(until)
        try:
            while not until.is_set() and not self._closing.is_set():
                await resp.write(b": held\n\n")
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(until.wait(), timeout=0.1)
        finally:
            self._held.discard(until)

    def release_holds(self) -> None:
        """End every stream held open now (a bot stopping at the end of a failed test must not wait for a
        turn whose release never came)."""
        for until in list(self._held):
            until.set()

    async def _stream_steps(
        self,
        resp: web.StreamResponse,
        request: web.Request,
        body: JsonDict,
        step: Step,
        prompt: int,
        chunk: Callable[..., JsonDict],
        send: Callable[..., Awaitable[None]],
        send_text: Callable[..., Awaitable[None]],
    ) -> web.StreamResponse:
        await send(chunk({"role": "assistant", "content": "", "refusal": None}))
        if isinstance(step, HangStep):
            await send_text(step.partial or "", 5, 0.0)
            await self._sleep(step.seconds)
            return self._drop(request)
        if isinstance(step, StreamErrorStep):
            await send_text(step.partial, 5, 0.0)
            await send(
                {"error": {"message": step.message, "type": "server_error", "param": None, "code": None}}
            )
            await resp.write_eof()
            return resp
        assert isinstance(step, TextStep | ToolCallsStep)
        if isinstance(step, TextStep):
            if step.reasoning:
                await send_text(step.reasoning, step.chunk_size, step.chunk_delay, key="reasoning_content")
            await send_text(step.content, step.chunk_size, step.chunk_delay)
            if step.hold is not None:
                await self._hold_open(resp, step.hold)
            finish = step.finish_reason
            output: Any = step.content
        else:
            if step.content:
                await send_text(step.content, 5, step.chunk_delay)
            for index, tc in enumerate(step.calls):
                header = {
                    "index": index,
                    "id": self._call_id(tc),
                    "type": "function",
                    "function": {"name": tc.name, "arguments": ""},
                }
                await send(chunk({"tool_calls": [header]}), step.chunk_delay)
                size = max(1, math.ceil(len(tc.arguments) / max(step.fragments, 1)))
                for i in range(0, len(tc.arguments), size):
                    frag = {"index": index, "function": {"arguments": tc.arguments[i : i + size]}}
                    await send(chunk({"tool_calls": [frag]}), step.chunk_delay)
            finish = "tool_calls"
            output = [step.content or "", *[(tc.name, tc.arguments) for tc in step.calls]]
        await send(chunk({}, finish))
        options = body.get("stream_options") or {}
        if step.usage and options.get("include_usage"):
            await send(chunk(None, usage=self._usage(prompt, output)))
        await send("[DONE]")
        await resp.write_eof()
        return resp
