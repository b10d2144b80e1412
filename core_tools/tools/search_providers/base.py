"""What every search provider shares: the result and error types, the provider protocol, payload helpers."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

import httpx

SearchType = Literal["web", "news"]


class ProviderError(Exception):
    """A provider failed in an expected way (HTTP status, rate limit, bad payload); the text is shown."""


@dataclass(frozen=True)
class RawResult:
    """One result as a provider returned it, before cleaning."""

    title: str
    url: str
    snippet: str
    published: Any = None


class SearchProvider(Protocol):
    """A search backend: returns raw results or raises ProviderError / httpx errors."""

    name: str

    async def search(self, query: str, type: SearchType, count: int) -> list[RawResult]: ...


def status_error(resp: httpx.Response, *, key_setting: str | None = None) -> ProviderError:
    """The failure an HTTP error status means, naming the key setting when the key was rejected."""
    code = resp.status_code
    if code == 429:
        return ProviderError("rate limited (HTTP 429)")
    if code in (401, 403) and key_setting:
        return ProviderError(f"the API key was rejected (HTTP {code}); check {key_setting}")
    if code >= 500:
        return ProviderError(f"server error (HTTP {code})")
    return ProviderError(f"request refused (HTTP {code})")


def json_payload(resp: httpx.Response) -> Any:
    """The response's JSON; ProviderError when it is not JSON."""
    try:
        return resp.json()
    except ValueError as exc:
        raise ProviderError("malformed response (not JSON)") from exc


def results_list(payload: Any, *path: str) -> list[Any]:
    """The list at `path` in the payload (missing keys: empty); ProviderError on another shape."""
    node = payload
    for key in path:
        if not isinstance(node, dict):
            raise ProviderError("malformed response (unexpected JSON shape)")
        node = node.get(key, [])
    if not isinstance(node, list):
        raise ProviderError("malformed response (results is not a list)")
    return node


def raw_results(items: list[Any], title: str, url: str, snippet: str, *dates: str) -> list[RawResult]:
    """RawResults from the items with a string URL, reading the named fields (the first date present)."""
    out = []
    for it in items:
        if isinstance(it, dict) and isinstance(it.get(url), str):
            date = next((it[d] for d in dates if it.get(d)), None)
            out.append(RawResult(str(it.get(title) or ""), it[url], str(it.get(snippet) or ""), date))
    return out


def type_name(exc: BaseException) -> str:
    """Return the class name of `exc` (used in failure reasons)."""
    return type(exc).__name__
