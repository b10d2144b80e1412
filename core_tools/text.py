"""Short texts for people: a reason cut to fit a line without cutting a word."""

from __future__ import annotations

import re

_URL = re.compile(r"\bhttps?://\S+")


def clip(text: str, limit: int) -> str:
    """`text` on one line, at most `limit` characters: cut at the last word that fits, with "…"."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: max(limit - 1, 1)]
    space = cut.rfind(" ")
    if space >= limit // 2:  # a word boundary that keeps at least half the room
        cut = cut[:space]
    return cut.rstrip(" ,;:.-") + "…"


def without_urls(text: str) -> str:
    """`text` with every http(s) address replaced by `<url>` (a reason that names no host it did not ask)."""
    return _URL.sub("<url>", text)
