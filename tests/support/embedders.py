"""A small stand-in embedder for the tests that need another one than the real model (tests/conftest.py
has the real one, `embedder`)."""

from __future__ import annotations


class TinyEmbedder:
    """A different embedder (8-d bag of letters) to exercise reembed and the vec table rebuild."""

    id = "tiny:letters:8"
    dim = 8

    def _vec(self, text: str) -> list[float]:
        v = [0.0] * 8
        for ch in text.lower():
            if ch.isalpha():
                v[ord(ch) % 8] += 1.0
        norm = sum(x * x for x in v) ** 0.5 or 1.0
        return [x / norm for x in v]

    async def embed_query(self, text: str, *, user_id: int | None = None) -> list[float]:
        return self._vec(text)

    async def embed_passages(self, texts: list[str], *, user_id: int | None = None) -> list[list[float]]:
        return [self._vec(t) for t in texts]
