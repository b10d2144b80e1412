"""Tavily search API (keyed: TAVILY_API_KEY)."""

from __future__ import annotations

import httpx

from core_tools.tools.search_providers import base


class TavilyProvider:
    """Tavily search API (`topic: news` for news)."""

    name = "tavily"
    DEFAULT_BASE_URL = "https://api.tavily.com"

    def __init__(self, client: httpx.AsyncClient, api_key: str, *, base_url: str = DEFAULT_BASE_URL) -> None:
        self._client = client
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._url = base_url.rstrip("/") + "/search"

    async def search(self, query: str, type: base.SearchType, count: int) -> list[base.RawResult]:
        """POST a basic-depth search to Tavily."""
        body = {
            "query": query,
            "topic": "news" if type == "news" else "general",
            "max_results": min(count, 20),
            "search_depth": "basic",
        }
        resp = await self._client.post(self._url, json=body, headers=self._headers)
        if resp.status_code in (432, 433):
            raise base.ProviderError(f"plan usage limit reached (HTTP {resp.status_code})")
        if resp.status_code >= 400:
            raise base.status_error(resp, key_setting="TAVILY_API_KEY")
        items = base.results_list(base.json_payload(resp), "results")
        return base.raw_results(items, "title", "url", "content", "published_date")
