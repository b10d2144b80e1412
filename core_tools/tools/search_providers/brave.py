"""Brave Search API (keyed: BRAVE_API_KEY)."""

from __future__ import annotations

import httpx

from core_tools.tools.search_providers.base import (
    RawResult,
    SearchType,
    json_payload,
    raw_results,
    results_list,
    status_error,
)


class BraveProvider:
    """Brave Search API (web and news endpoints)."""

    name = "brave"
    DEFAULT_BASE_URL = "https://api.search.brave.com"

    def __init__(self, client: httpx.AsyncClient, api_key: str, *, base_url: str = DEFAULT_BASE_URL) -> None:
        self._client = client
        self._headers = {"X-Subscription-Token": api_key, "Accept": "application/json"}
        self._base = base_url.rstrip("/")

    async def search(self, query: str, type: SearchType, count: int) -> list[RawResult]:
        """Query Brave's web or news endpoint."""
        path = "/res/v1/news/search" if type == "news" else "/res/v1/web/search"
        resp = await self._client.get(
            self._base + path, params={"q": query, "count": min(count, 20)}, headers=self._headers
        )
        if resp.status_code >= 400:
            raise status_error(resp, key_setting="BRAVE_API_KEY")
        payload = json_payload(resp)
        items = (
            results_list(payload, "results") if type == "news" else results_list(payload, "web", "results")
        )
        return raw_results(items, "title", "url", "description", "page_age")
