"""SearXNG: a self-hosted metasearch instance's JSON API."""

from __future__ import annotations

import httpx

from core_tools.tools.search_providers import base


class SearxngProvider:
    """A SearXNG instance's JSON API (`format=json` must be enabled in its settings.yml)."""

    name = "searxng"

    def __init__(self, client: httpx.AsyncClient, base_url: str) -> None:
        self._client = client
        self._url = base_url.rstrip("/") + "/search"

    async def search(self, query: str, type: base.SearchType, count: int) -> list[base.RawResult]:
        """Query SearXNG's general or news category."""
        params = {"q": query, "format": "json", "categories": "news" if type == "news" else "general"}
        resp = await self._client.get(self._url, params=params)
        if resp.status_code == 403:
            raise base.ProviderError(
                "HTTP 403: the instance does not serve JSON; enable it by adding `json` under "
                "`search.formats` in SearXNG's settings.yml (e.g. formats: [html, json]) and restart it"
            )
        if resp.status_code == 429:
            raise base.ProviderError(
                "rate limited (HTTP 429): SearXNG's bot limiter may be blocking this client; turn off "
                "`server.limiter` in settings.yml or allow-list this client's address in limiter.toml"
            )
        if resp.status_code >= 400:
            raise base.status_error(resp)
        payload = base.json_payload(resp)
        results = base.raw_results(
            base.results_list(payload, "results"), "title", "url", "content", "publishedDate", "pubdate"
        )
        if not results and isinstance(payload, dict) and payload.get("unresponsive_engines"):
            # An empty page with failing engines is an outage, not a true "nothing found".
            engines = ", ".join(
                f"{e[0]} ({e[1]})" if isinstance(e, list) and len(e) > 1 else str(e)
                for e in payload["unresponsive_engines"][:5]
            )
            raise base.ProviderError(f"no results; engines not responding: {engines}")
        return results
