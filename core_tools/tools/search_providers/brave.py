"""Brave Search API (keyed: BRAVE_API_KEY)."""

from __future__ import annotations

import httpx

from core_tools.tools.search_providers import base


class BraveProvider:
    """Brave Search API (web and news endpoints)."""

    name = "brave"
    DEFAULT_BASE_URL = "https://api.search.brave.com"

    def __init__(self, client: httpx.AsyncClient, api_key: str, *, base_url: str = DEFAULT_BASE_URL) -> None:
        self._client = client
        self._headers = {"X-Subscription-Token": api_key, "Accept": "application/json"}
        self._base = base_url.rstrip("/")

    async def search(self, query: str, type: base.SearchType, count: int) -> list[base.RawResult]:
        """Query Brave's web or news endpoint."""
        path = "/res/v1/news/search" if type == "news" else "/res/v1/web/search"
        resp = await self._client.get(
            self._base + path, params={"q": query, "count": min(count, 20)}, headers=self._headers
        )
        if resp.status_code >= 400:
            raise base.status_error(resp, key_setting="BRAVE_API_KEY")
        payload = base.json_payload(resp)
        items = (
            base.results_list(payload, "results")
            if type == "news"
            else base.results_list(payload, "web", "results")
        )
        return base.raw_results(items, "title", "url", "description", "page_age")
