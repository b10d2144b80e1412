"""DuckDuckGo (and the other keyless engines) through the `ddgs` package: no key, no server to run."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from core_tools.text import clip, without_urls
from core_tools.tools.search_providers import base


class DDGSLike(Protocol):
    """The part of `ddgs.DDGS` the DuckDuckGo provider uses (a fake can stand in for tests)."""

    def text(self, query: str, **kwargs: Any) -> list[dict[str, Any]]: ...

    def news(self, query: str, **kwargs: Any) -> list[dict[str, Any]]: ...


def _has_class(exc: BaseException, name: str) -> bool:
    return any(cls.__name__ == name for cls in type(exc).__mro__)


def _reason(exc: BaseException) -> str:
    """Why ddgs failed, naming no engine's host: ddgs tries several keyless engines (Brave, Yahoo,
    Mojeek...), and a reason that names one of them reads as if another provider had been asked."""
    text = str(exc)
    lowered = text.lower()
    if "dns" in lowered:
        return "no keyless engine could be reached (DNS lookup failed: is this machine online?)"
    if any(s in lowered for s in ("error sending request", "connecterror", "connection refused")):
        return "no keyless engine could be reached (could not connect)"
    return clip(f"failed: {base.type_name(exc)}: {without_urls(text)}", 160)


class DuckDuckGoProvider:
    """DuckDuckGo (and the other keyless engines) through the synchronous `ddgs` package, in a thread."""

    name = "duckduckgo"

    def __init__(
        self,
        *,
        timeout_s: float = 8.0,
        ddgs_factory: Callable[[], DDGSLike] | None = None,
        region: str = "us-en",
        safesearch: str = "moderate",
    ) -> None:
        self._timeout_s = timeout_s
        self._factory = ddgs_factory or self._default_factory
        self._region = region
        self._safesearch = safesearch

    def _default_factory(self) -> DDGSLike:
        from ddgs import DDGS  # lazy: ddgs pulls in its own HTTP stack, only needed when this provider runs

        return DDGS(timeout=max(1, round(self._timeout_s)))

    def _run(self, query: str, type: base.SearchType, count: int) -> list[dict[str, Any]]:
        ddgs = self._factory()
        kwargs = {"region": self._region, "safesearch": self._safesearch, "max_results": count}
        return ddgs.news(query, **kwargs) if type == "news" else ddgs.text(query, **kwargs)

    async def search(self, query: str, type: base.SearchType, count: int) -> list[base.RawResult]:
        """Run the ddgs search off the event loop; its exceptions become base.ProviderError."""
        try:
            rows = await asyncio.to_thread(self._run, query, type, count)
        except Exception as exc:  # ddgs raises its own hierarchy and whatever its HTTP stack raises
            if _has_class(exc, "RatelimitException"):
                raise base.ProviderError("rate limited") from exc
            if _has_class(exc, "TimeoutException"):
                raise base.ProviderError("timed out") from exc
            if "no results" in str(exc).lower():
                return []
            raise base.ProviderError(_reason(exc)) from exc
        if not isinstance(rows, list):
            raise base.ProviderError("malformed response (results is not a list)")
        url_key_name = "url" if type == "news" else "href"
        return base.raw_results(rows, "title", url_key_name, "body", "date")
