"""The search chain of the settings is checked without building the tool (core_tools/tools/search.py,
`provider_chain`): the start-up's check of the settings made two HTTP clients and an event loop for it,
~70 ms of CPU (issue 32 §7)."""

from __future__ import annotations

import pytest

from core_tools.tools.search import provider_chain


def test_the_chain_is_named_in_order_and_defaults_without_names() -> None:
    assert provider_chain(provider_names=["Brave", "ddg", "brave"], brave_api_key="k") == [
        "brave",
        "duckduckgo",
    ]
    assert provider_chain(searxng_url="http://s", tavily_api_key="t") == ["searxng", "tavily", "duckduckgo"]


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (["bing"], "SEARCH_PROVIDER: unknown provider 'bing'"),
        (["searxng"], "SEARCH_PROVIDER includes searxng but SEARXNG_URL is not set"),
        (["duckduckgo", "tavily"], "SEARCH_PROVIDER includes tavily but TAVILY_API_KEY is not set"),
        ([" "], "SEARCH_PROVIDER names no provider"),
    ],
)
def test_an_unusable_chain_is_refused_with_the_setting_to_fix(names: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        provider_chain(provider_names=names)
