"""Search and fetch tools against fake providers and pages on 127.0.0.1 (real httpx, real aiohttp)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import httpx
import pytest
from ddgs.exceptions import RatelimitException

from core_tools.errors import ToolError
from core_tools.tools.search import UNTRUSTED_WEB_NOTE, SearchTool, build_search_tool
from core_tools.tools.search_providers.base import ProviderError
from core_tools.tools.search_providers.brave import BraveProvider
from core_tools.tools.search_providers.duckduckgo import DuckDuckGoProvider
from core_tools.tools.search_providers.searxng import SearxngProvider
from core_tools.tools.search_providers.tavily import TavilyProvider
from core_tools.tools.search_results import clean_url, parse_date, url_key
from core_tools.tools.web import PageFetcher, is_public_address
from core_tools.types import ToolContext
from tests.support.fakes.search import (
    ARTICLE_HTML,
    FakeServer,
    brave_news_payload,
    brave_result,
    brave_web_payload,
    drip,
    hang,
    redirect,
    reply_json,
    reply_text,
    searxng_payload,
    searxng_result,
    stream_bytes,
    tavily_payload,
    tavily_result,
)

BRAVE_KEY = "BSA-secret-brave-key-123"
TAVILY_KEY = "tvly-secret-tavily-key-456"


class Ctx:
    """A ToolContext whose progress lines are recorded."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ctx = ToolContext(user_id=1, chat_id=2, session_id="s", progress=self._progress)

    async def _progress(self, line: str) -> None:
        self.lines.append(line)


@pytest.fixture
async def fake() -> AsyncIterator[FakeServer]:
    server = FakeServer()
    await server.start()
    yield server
    await server.close()


@pytest.fixture
async def fake2() -> AsyncIterator[FakeServer]:
    server = FakeServer()
    await server.start()
    yield server
    await server.close()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(2.0, connect=1.0), trust_env=False) as c:
        yield c


# A provider's budget: loopback fakes answer in milliseconds, but a loaded 2-core machine has let 2 s pass
# before one did; a test of the timeout itself sets a short one.
def tool(providers: list[Any], *, timeout_s: float = 30.0, cache_ttl_s: float = 0.0, **kw: Any) -> SearchTool:
    return SearchTool(providers, timeout_s=timeout_s, cache_ttl_s=cache_ttl_s, **kw)


# --- SearXNG ----------------------------------------------------------------------------------------------


async def test_searxng_results_are_normalised_and_deduplicated(
    fake: FakeServer, client: httpx.AsyncClient
) -> None:
    fake.on(
        "GET",
        "/search",
        reply_json(
            searxng_payload(
                [
                    searxng_result(
                        "https://Example.com/a/?utm_source=x&id=7#frag",
                        "<b>A</b> &amp; co",
                        "<p>Hello <em>world</em> &lt;3</p><script>x</script>",
                        None,
                    ),
                    searxng_result("https://example.com/a?id=7&fbclid=abc", "dup", "dup"),
                    searxng_result("http://example.com/a/?gclid=1&id=7", "dup2", "dup"),
                    searxng_result("https://other.org/b", "B", "x" * 1000, "2024-05-01T10:00:00"),
                    {"title": "no url"},
                    searxng_result("javascript:alert(1)", "bad scheme"),
                ]
            )
        ),
    )
    c = Ctx()
    out = await tool([SearxngProvider(client, fake.base_url)]).search(c.ctx, "  otters   tools ")
    assert c.lines == ["searching: otters tools"]
    req = fake.requests[0]
    assert req.query == {"q": "otters tools", "format": "json", "categories": "general"}
    assert out["untrusted_external_content"] is True and out["note"] == UNTRUSTED_WEB_NOTE
    assert out["provider"] == "searxng"
    first, second = out["results"]
    assert first == {
        "title": "A & co",
        "url": "https://Example.com/a/?id=7",
        "snippet": "Hello world <3",
        "source": "searxng",
    }
    assert "date" not in first  # publishedDate: null -> key absent
    assert second["date"] == "2024-05-01T10:00:00+00:00"
    assert len(second["snippet"]) <= 301 and second["snippet"].endswith("…")


async def test_searxng_news_uses_news_category_and_sorts_newest_first(
    fake: FakeServer, client: httpx.AsyncClient
) -> None:
    fake.on(
        "GET",
        "/search",
        reply_json(
            searxng_payload(
                [
                    searxng_result("https://n.com/old", "old", date="2023-01-01T00:00:00"),
                    searxng_result("https://n.com/undated", "undated"),
                    searxng_result("https://n.com/new", "new", date="2024-06-01 08:00:00"),
                    searxng_result("https://n.com/mid", "mid", date="2024-01-01T00:00:00Z"),
                ]
            )
        ),
    )
    out = await tool([SearxngProvider(client, fake.base_url)]).search(Ctx().ctx, "otters", type="news")
    assert fake.requests[0].query["categories"] == "news"
    assert [r["title"] for r in out["results"]] == ["new", "mid", "old", "undated"]
    assert out["type"] == "news"


@pytest.mark.parametrize(
    ("status", "expected"),
    [(403, "search.formats"), (429, "rate limited"), (500, "server error (HTTP 500)"), (404, "HTTP 404")],
)
async def test_searxng_http_errors_are_explained(
    fake: FakeServer, client: httpx.AsyncClient, status: int, expected: str
) -> None:
    fake.on("GET", "/search", reply_text("nope", status=status))
    with pytest.raises(ToolError) as err:
        await tool([SearxngProvider(client, fake.base_url)]).search(Ctx().ctx, "q")
    assert expected in str(err.value)
    assert str(err.value).startswith("Web search failed with every configured provider. searxng:")


async def test_searxng_403_hint_mentions_settings_yml(fake: FakeServer, client: httpx.AsyncClient) -> None:
    fake.on("GET", "/search", reply_text("Forbidden", status=403))
    with pytest.raises(ToolError, match=r"adding `json` under `search.formats` in SearXNG's settings.yml"):
        await tool([SearxngProvider(client, fake.base_url)]).search(Ctx().ctx, "q")


@pytest.mark.parametrize("body", ["<html>not json</html>", '{"results": "nope"}', "[1, 2]"])
async def test_malformed_payload_is_a_failure(fake: FakeServer, client: httpx.AsyncClient, body: str) -> None:
    fake.on("GET", "/search", reply_text(body, content_type="application/json"))
    with pytest.raises(ToolError, match="searxng: malformed response"):
        await tool([SearxngProvider(client, fake.base_url)]).search(Ctx().ctx, "q")


async def test_searxng_empty_with_unresponsive_engines_fails_over(
    fake: FakeServer, fake2: FakeServer, client: httpx.AsyncClient
) -> None:
    fake.on("GET", "/search", reply_json(searxng_payload([], unresponsive_engines=[["google", "timeout"]])))
    fake2.on("GET", "/res/v1/web/search", reply_json(brave_web_payload([brave_result("https://b.com/")])))
    out = await tool(
        [SearxngProvider(client, fake.base_url), BraveProvider(client, BRAVE_KEY, base_url=fake2.base_url)]
    ).search(Ctx().ctx, "q")
    assert out["provider"] == "brave"
    assert "google (timeout)" in out["failed_providers"]["searxng"]


# --- Brave and Tavily -------------------------------------------------------------------------------------


async def test_brave_web_and_news(fake: FakeServer, client: httpx.AsyncClient) -> None:
    fake.on(
        "GET",
        "/res/v1/web/search",
        reply_json(
            brave_web_payload(
                [
                    brave_result("https://b.com/1", "<strong>One</strong>", "about <strong>otters</strong>"),
                ]
            )
        ),
    )
    fake.on(
        "GET",
        "/res/v1/news/search",
        reply_json(
            brave_news_payload(
                [
                    brave_result("https://b.com/n1", "older", page_age="2024-01-02T03:04:05"),
                    brave_result("https://b.com/n2", "newer", page_age="2024-03-02T03:04:05"),
                ]
            )
        ),
    )
    t = tool([BraveProvider(client, BRAVE_KEY, base_url=fake.base_url)])
    web_out = await t.search(Ctx().ctx, "otters", max_results=3)
    assert web_out["results"] == [
        {"title": "One", "url": "https://b.com/1", "snippet": "about otters", "source": "brave"}
    ]
    news_out = await t.search(Ctx().ctx, "otters", type="news")
    assert [r["title"] for r in news_out["results"]] == ["newer", "older"]
    assert news_out["results"][0]["date"] == "2024-03-02T03:04:05+00:00"
    assert fake.requests[0].headers["X-Subscription-Token"] == BRAVE_KEY
    assert fake.requests[0].query["q"] == "otters" and fake.requests[0].query["count"] == "8"


async def test_tavily_web_and_news(fake: FakeServer, client: httpx.AsyncClient) -> None:
    fake.on(
        "POST",
        "/search",
        reply_json(
            tavily_payload(
                [
                    tavily_result(
                        "https://t.com/1", "T1", "tavily <i>snippet</i>", "Wed, 01 May 2024 12:00:00 GMT"
                    ),
                ]
            )
        ),
    )
    t = tool([TavilyProvider(client, TAVILY_KEY, base_url=fake.base_url)])
    out = await t.search(Ctx().ctx, "otters", type="news", max_results=2)
    assert out["results"] == [
        {
            "title": "T1",
            "url": "https://t.com/1",
            "snippet": "tavily snippet",
            "date": "2024-05-01T12:00:00+00:00",
            "source": "tavily",
        }
    ]
    body = fake.requests[0].json()
    assert body["topic"] == "news" and body["query"] == "otters" and body["max_results"] == 7
    assert fake.requests[0].headers["Authorization"] == f"Bearer {TAVILY_KEY}"
    await t.search(Ctx().ctx, "otters")
    assert fake.requests[1].json()["topic"] == "general"


async def test_rejected_keys_are_never_echoed(
    fake: FakeServer, client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    fake.on("GET", "/res/v1/web/search", reply_text(f"bad token {BRAVE_KEY}", status=401))
    fake.on("POST", "/search", reply_text(f"bad token {TAVILY_KEY}", status=401))
    t = tool(
        [
            BraveProvider(client, BRAVE_KEY, base_url=fake.base_url),
            TavilyProvider(client, TAVILY_KEY, base_url=fake.base_url),
        ]
    )
    with caplog.at_level(logging.DEBUG), pytest.raises(ToolError) as err:
        await t.search(Ctx().ctx, "q")
    msg = str(err.value)
    assert "brave: the API key was rejected (HTTP 401); check BRAVE_API_KEY" in msg
    assert "tavily: the API key was rejected (HTTP 401); check TAVILY_API_KEY" in msg
    for secret in (BRAVE_KEY, TAVILY_KEY):
        assert secret not in msg and secret not in caplog.text


# --- failover, timeouts, chain ----------------------------------------------------------------------------


async def test_first_fails_second_answers(
    fake: FakeServer, fake2: FakeServer, client: httpx.AsyncClient
) -> None:
    fake.on("GET", "/search", reply_text("boom", status=500))
    fake2.on("POST", "/search", reply_json(tavily_payload([tavily_result("https://t.com/")])))
    out = await tool(
        [SearxngProvider(client, fake.base_url), TavilyProvider(client, TAVILY_KEY, base_url=fake2.base_url)]
    ).search(Ctx().ctx, "q")
    assert out["provider"] == "tavily" and out["results"][0]["source"] == "tavily"
    assert out["failed_providers"] == {"searxng": "server error (HTTP 500)"}


async def test_hanging_provider_fails_over_within_its_timeout(
    fake: FakeServer, fake2: FakeServer, client: httpx.AsyncClient
) -> None:
    fake.on("GET", "/search", hang(fake))
    fake2.on("GET", "/res/v1/web/search", reply_json(brave_web_payload([brave_result("https://b.com/")])))
    t = tool(
        [SearxngProvider(client, fake.base_url), BraveProvider(client, BRAVE_KEY, base_url=fake2.base_url)],
        timeout_s=0.3,
    )
    # The hang is endless: finishing at all (the outer deadline is only a guard) shows the bound.
    out = await asyncio.wait_for(t.search(Ctx().ctx, "q"), 120)
    assert out["provider"] == "brave"
    assert out["failed_providers"] == {"searxng": "timed out after 0.3 s"}


async def test_all_fail_gives_one_error_naming_each(fake: FakeServer, client: httpx.AsyncClient) -> None:
    fake.on("GET", "/search", reply_text("Forbidden", status=403))
    fake.on("GET", "/res/v1/web/search", reply_text("slow down", status=429))
    fake.on("POST", "/search", reply_text("{not json", content_type="application/json"))

    class RateLimited:
        def text(self, query: str, **kwargs: Any) -> list[dict[str, Any]]:
            raise RatelimitException("202 Ratelimit")

        def news(self, query: str, **kwargs: Any) -> list[dict[str, Any]]:
            raise RatelimitException("202 Ratelimit")

    t = tool(
        [
            SearxngProvider(client, fake.base_url),
            BraveProvider(client, BRAVE_KEY, base_url=fake.base_url),
            TavilyProvider(client, TAVILY_KEY, base_url=fake.base_url),
            DuckDuckGoProvider(ddgs_factory=RateLimited),
        ]
    )
    with pytest.raises(ToolError) as err:
        await t.search(Ctx().ctx, "q")
    msg = str(err.value)
    assert msg.count("searxng:") == 1 and "search.formats" in msg
    assert "brave: rate limited (HTTP 429)" in msg
    assert "tavily: malformed response (not JSON)" in msg
    assert "duckduckgo: rate limited" in msg
    assert "Traceback" not in msg


async def test_connection_refused_is_a_normal_failure(client: httpx.AsyncClient) -> None:
    # Port 9 on loopback: nothing listens there, so the connect fails at once.
    with pytest.raises(ToolError, match=r"searxng: request failed \(ConnectError"):
        await tool([SearxngProvider(client, "http://127.0.0.1:9")]).search(Ctx().ctx, "q")


async def test_all_empty_returns_empty_results(fake: FakeServer, client: httpx.AsyncClient) -> None:
    fake.on("GET", "/search", reply_json(searxng_payload([])))

    class Empty:
        def text(self, query: str, **kwargs: Any) -> list[dict[str, Any]]:
            return []

        def news(self, query: str, **kwargs: Any) -> list[dict[str, Any]]:
            return []

    out = await tool([SearxngProvider(client, fake.base_url), DuckDuckGoProvider(ddgs_factory=Empty)]).search(
        Ctx().ctx, "q"
    )
    assert out["results"] == [] and out["provider"] == "searxng"


# --- DuckDuckGo -------------------------------------------------------------------------------------------


class FakeDDGS:
    calls: ClassVar[list[tuple[str, str, dict[str, Any]]]] = []

    def text(self, query: str, **kwargs: Any) -> list[dict[str, Any]]:
        self.calls.append(("text", query, kwargs))
        return [
            {"title": "D1", "href": "https://d.com/1?utm_medium=x", "body": "duck <b>body</b>"},
            {"title": "D1 again", "href": "https://d.com/1/", "body": "dup"},
        ]

    def news(self, query: str, **kwargs: Any) -> list[dict[str, Any]]:
        self.calls.append(("news", query, kwargs))
        return [
            {
                "date": "2024-02-01T00:00:00+00:00",
                "title": "N old",
                "body": "b",
                "url": "https://d.com/o",
                "image": "",
                "source": "Paper",
            },
            {
                "date": "2024-05-01T00:00:00+00:00",
                "title": "N new",
                "body": "b",
                "url": "https://d.com/n",
                "image": "",
                "source": "Paper",
            },
        ]


async def test_duckduckgo_provider_with_injected_ddgs() -> None:
    FakeDDGS.calls = []
    t = tool([DuckDuckGoProvider(ddgs_factory=FakeDDGS)])
    out = await t.search(Ctx().ctx, "otters", max_results=3)
    assert out["results"] == [
        {"title": "D1", "url": "https://d.com/1", "snippet": "duck body", "source": "duckduckgo"}
    ]
    news = await t.search(Ctx().ctx, "otters", type="news")
    assert [r["title"] for r in news["results"]] == ["N new", "N old"]
    assert [c[0] for c in FakeDDGS.calls] == ["text", "news"]
    assert FakeDDGS.calls[0][2]["max_results"] == 8


async def test_duckduckgo_rate_limit_fails_over(fake: FakeServer, client: httpx.AsyncClient) -> None:
    class Limited:
        def text(self, query: str, **kwargs: Any) -> list[dict[str, Any]]:
            raise RatelimitException("https://duckduckgo.com 202 Ratelimit")

        def news(self, query: str, **kwargs: Any) -> list[dict[str, Any]]:
            raise AssertionError("not called")

    fake.on("GET", "/search", reply_json(searxng_payload([searxng_result("https://s.com/")])))
    out = await tool(
        [DuckDuckGoProvider(ddgs_factory=Limited), SearxngProvider(client, fake.base_url)]
    ).search(Ctx().ctx, "q")
    assert out["provider"] == "searxng"
    assert out["failed_providers"] == {"duckduckgo": "rate limited"}


# --- arguments, cache -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("asked", "got"), [(50, 10), (0, 1), (-3, 1), (4, 4)])
async def test_max_results_is_clamped(
    fake: FakeServer, client: httpx.AsyncClient, asked: int, got: int
) -> None:
    fake.on(
        "GET",
        "/search",
        reply_json(searxng_payload([searxng_result(f"https://many.com/{i}") for i in range(15)])),
    )
    out = await tool([SearxngProvider(client, fake.base_url)]).search(Ctx().ctx, "q", max_results=asked)
    assert len(out["results"]) == got


@pytest.mark.parametrize("query", ["", "   ", "\n\t"])
async def test_empty_query_is_a_clear_error(query: str) -> None:
    c = Ctx()
    with pytest.raises(ToolError, match="query is empty"):
        await tool([DuckDuckGoProvider(ddgs_factory=FakeDDGS)]).search(c.ctx, query)
    assert c.lines == []


async def test_cache_hits_and_expiry_with_injected_clock(fake: FakeServer, client: httpx.AsyncClient) -> None:
    fake.on("GET", "/search", reply_json(searxng_payload([searxng_result("https://c.com/")])))
    now = [1000.0]
    t = tool([SearxngProvider(client, fake.base_url)], cache_ttl_s=60, clock=lambda: now[0])
    first = await t.search(Ctx().ctx, "Otters  news")
    first["results"][0]["title"] = "mutated by caller"
    second = await t.search(Ctx().ctx, "otters news")  # same after whitespace/case normalising
    assert fake.count("/search") == 1
    assert second["results"][0]["title"] == "Title"
    await t.search(Ctx().ctx, "otters news", max_results=3)  # different key
    await t.search(Ctx().ctx, "otters news", type="news")  # different key
    assert fake.count("/search") == 3
    now[0] += 59
    await t.search(Ctx().ctx, "otters news")
    assert fake.count("/search") == 3
    now[0] += 2
    await t.search(Ctx().ctx, "otters news")
    assert fake.count("/search") == 4


async def test_failures_are_not_cached(fake: FakeServer, client: httpx.AsyncClient) -> None:
    fake.on("GET", "/search", reply_text("boom", status=500))
    t = tool([SearxngProvider(client, fake.base_url)], cache_ttl_s=60)
    for _ in range(2):
        with pytest.raises(ToolError):
            await t.search(Ctx().ctx, "q")
    assert fake.count("/search") == 2


# --- factory ----------------------------------------------------------------------------------------------


async def test_factory_default_chain_and_describe() -> None:
    t = build_search_tool(
        provider_names=None,
        searxng_url="http://searx.local",
        brave_api_key=BRAVE_KEY,
        tavily_api_key=None,
        timeout_s=8,
    )
    try:
        assert t.describe() == "search: searxng -> brave -> duckduckgo"
        assert BRAVE_KEY not in t.describe()
    finally:
        await t.aclose()
    t = build_search_tool(
        provider_names=None, searxng_url=None, brave_api_key=None, tavily_api_key=None, timeout_s=8
    )
    assert t.describe() == "search: duckduckgo"
    await t.aclose()
    t = build_search_tool(
        provider_names=["ddg", "searxng"],
        searxng_url="http://s",
        brave_api_key=None,
        tavily_api_key=None,
        timeout_s=8,
    )
    assert t.describe() == "search: duckduckgo -> searxng"
    await t.aclose()


def test_factory_rejects_bad_configuration() -> None:
    with pytest.raises(ValueError, match="unknown provider 'bing'"):
        build_search_tool(
            provider_names=["bing"], searxng_url=None, brave_api_key=None, tavily_api_key=None, timeout_s=8
        )
    with pytest.raises(ValueError, match="BRAVE_API_KEY is not set"):
        build_search_tool(
            provider_names=["brave"], searxng_url=None, brave_api_key=None, tavily_api_key=None, timeout_s=8
        )


async def test_factory_uses_injected_client_and_base_urls(
    fake: FakeServer, client: httpx.AsyncClient
) -> None:
    fake.on("GET", "/res/v1/web/search", reply_json(brave_web_payload([brave_result("https://b.com/")])))
    t = build_search_tool(
        provider_names=["brave"],
        searxng_url=None,
        brave_api_key=BRAVE_KEY,
        tavily_api_key=None,
        timeout_s=2,
        client=client,
        brave_base_url=fake.base_url,
    )
    out = await t.search(Ctx().ctx, "q")
    assert out["provider"] == "brave"
    await t.aclose()
    assert not client.is_closed  # an injected client belongs to the caller


# --- helpers ----------------------------------------------------------------------------------------------


def test_url_normalising() -> None:
    assert clean_url("https://a.com/x?utm_source=1&b=2&UTM_Campaign=3&fbclid=z#top") == "https://a.com/x?b=2"
    assert url_key("https://WWW.A.com:443/x/?b=2&a=1") == url_key("http://www.a.com/x?a=1&b=2&gclid=9")
    assert url_key("https://a.com/x") != url_key("https://a.com/y")


def test_parse_date_forms() -> None:
    assert parse_date("2024-05-01T10:00:00Z") == "2024-05-01T10:00:00+00:00"
    assert parse_date("2024-05-01T12:00:00+02:00") == "2024-05-01T10:00:00+00:00"
    assert parse_date("Wed, 01 May 2024 10:00:00 GMT") == "2024-05-01T10:00:00+00:00"
    assert parse_date(1714557600) == "2024-05-01T10:00:00+00:00"
    assert parse_date(None) is None and parse_date("2 days ago") is None and parse_date("") is None


# --- fetch ------------------------------------------------------------------------------------------------


@pytest.fixture
async def open_fetch() -> AsyncIterator[SearchTool]:
    t = tool(
        [DuckDuckGoProvider(ddgs_factory=FakeDDGS)],
        fetcher=PageFetcher(allow_private=True, timeout_s=1.0, max_bytes=50_000),
    )
    yield t
    await t.aclose()


@pytest.fixture
async def closed_fetch() -> AsyncIterator[SearchTool]:
    t = tool([DuckDuckGoProvider(ddgs_factory=FakeDDGS)], fetcher=PageFetcher(timeout_s=1.0))
    yield t
    await t.aclose()


async def test_fetch_returns_readable_text(fake: FakeServer, open_fetch: SearchTool) -> None:
    fake.on("GET", "/article", reply_text(ARTICLE_HTML, content_type="text/html; charset=utf-8"))
    c = Ctx()
    out = await open_fetch.fetch(c.ctx, f"{fake.base_url}/article")
    assert c.lines == ["fetching: 127.0.0.1"]
    assert out["untrusted_external_content"] is True and out["note"] == UNTRUSTED_WEB_NOTE
    assert out["title"] == "The Fake Gazette – Otters"
    assert "sea otters using rocks" in out["text"]
    assert "SCRIPT-TEXT" not in out["text"] and "color: red" not in out["text"]
    assert out["truncated"] is False and out["url"] == f"{fake.base_url}/article"
    short = await open_fetch.fetch(c.ctx, f"{fake.base_url}/article", max_chars=10)  # clamped up to 500
    assert len(short["text"]) <= 502


async def test_fetch_follows_redirects_and_reports_final_url(
    fake: FakeServer, open_fetch: SearchTool
) -> None:
    fake.on("GET", "/r1", redirect("/r2", 301))
    fake.on("GET", "/r2", redirect(f"{fake.base_url}/plain"))
    fake.on("GET", "/plain", reply_text("just text\n", content_type="text/plain"))
    out = await open_fetch.fetch(Ctx().ctx, f"{fake.base_url}/r1")
    assert out["text"] == "just text" and out["url"] == f"{fake.base_url}/plain"
    assert out["requested_url"] == f"{fake.base_url}/r1" and out["title"] is None


async def test_fetch_redirect_loop_is_bounded(fake: FakeServer, open_fetch: SearchTool) -> None:
    fake.on("GET", "/loop", redirect("/loop"))
    with pytest.raises(ToolError, match="more than 5 redirects"):
        await open_fetch.fetch(Ctx().ctx, f"{fake.base_url}/loop")
    assert fake.count("/loop") == 6


async def test_fetch_json_is_text_and_binary_is_refused(fake: FakeServer, open_fetch: SearchTool) -> None:
    fake.on("GET", "/data.json", reply_json({"otters": 3}))
    fake.on("GET", "/doc.pdf", reply_text(b"%PDF-1.7\x00\x01", content_type="application/pdf"))
    out = await open_fetch.fetch(Ctx().ctx, f"{fake.base_url}/data.json")
    assert out["text"] == '{"otters": 3}' and out["content_type"] == "application/json"
    with pytest.raises(ToolError, match="application/pdf"):
        await open_fetch.fetch(Ctx().ctx, f"{fake.base_url}/doc.pdf")


async def test_fetch_http_error_status(fake: FakeServer, open_fetch: SearchTool) -> None:
    with pytest.raises(ToolError, match="HTTP 404"):
        await open_fetch.fetch(Ctx().ctx, f"{fake.base_url}/missing")


async def test_fetch_size_cap_stops_reading(fake: FakeServer, open_fetch: SearchTool) -> None:
    fake.on("GET", "/big", stream_bytes(5_000_000))
    out = await open_fetch.fetch(Ctx().ctx, f"{fake.base_url}/big", max_chars=20000)
    assert out["truncated"] is True
    assert len(out["text"]) <= 20002


async def test_fetch_total_time_limit(fake: FakeServer) -> None:
    # Every read is quick (no per-read timeout fires); only the overall limit can stop it.
    fake.on("GET", "/slow", drip(fake))
    fake.on("GET", "/hang", hang(fake))
    t = tool(
        [DuckDuckGoProvider(ddgs_factory=FakeDDGS)], fetcher=PageFetcher(allow_private=True, timeout_s=0.4)
    )
    try:
        with pytest.raises(ToolError, match=r"gave up after 0\.4 s"):
            await t.fetch(Ctx().ctx, f"{fake.base_url}/slow")
        with pytest.raises(ToolError, match=r"(gave up after|timed out)"):
            await t.fetch(Ctx().ctx, f"{fake.base_url}/hang")
    finally:
        await t.aclose()


@pytest.mark.parametrize(
    "url",
    ["file:///etc/passwd", "ftp://example.com/x", "gopher://example.com/", "not a url", "http:///nohost"],
)
async def test_fetch_refuses_non_http_schemes(url: str, closed_fetch: SearchTool) -> None:
    c = Ctx()
    with pytest.raises(ToolError, match="Cannot fetch that URL"):
        await closed_fetch.fetch(c.ctx, url)
    assert c.lines == []


async def test_fetch_refuses_private_addresses(fake: FakeServer, closed_fetch: SearchTool) -> None:
    for url in (
        f"{fake.base_url}/article",
        f"http://localhost:{fake.port}/",
        "http://10.0.0.1/",
        f"http://[::1]:{fake.port}/",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:127.0.0.1]/",
        "http://0.0.0.0/",
        "http://224.0.0.1/",
    ):
        with pytest.raises(ToolError, match="refusing to fetch"):
            await closed_fetch.fetch(Ctx().ctx, url)
    assert fake.requests == []


async def test_fetch_refuses_redirect_to_private_address(fake: FakeServer) -> None:
    # The fake stands for a public host: the policy admits 127.0.0.1 only, so the hop to 10.0.0.1 or ::1
    # is refused before any connection is made.
    fetcher = PageFetcher(timeout_s=1.0, policy=lambda ip: str(ip) == "127.0.0.1")
    t = tool([DuckDuckGoProvider(ddgs_factory=FakeDDGS)], fetcher=fetcher)
    fake.on("GET", "/to-private", redirect("http://10.0.0.1/admin"))
    fake.on("GET", "/to-v6", redirect(f"http://[::1]:{fake.port}/article"))
    fake.on("GET", "/to-file", redirect("file:///etc/passwd"))
    try:
        with pytest.raises(ToolError, match=r"refusing to fetch 10\.0\.0\.1"):
            await t.fetch(Ctx().ctx, f"{fake.base_url}/to-private")
        with pytest.raises(ToolError, match="refusing to fetch ::1"):
            await t.fetch(Ctx().ctx, f"{fake.base_url}/to-v6")
        with pytest.raises(ToolError, match="only http and https"):
            await t.fetch(Ctx().ctx, f"{fake.base_url}/to-file")
        assert fake.count("/article") == 0
    finally:
        await t.aclose()


async def test_fetch_checks_every_resolved_address_and_connects_to_the_checked_one(fake: FakeServer) -> None:
    async def resolver(host: str, port: int) -> list[str]:
        return {"mixed.test": ["93.184.216.34", "10.1.2.3"], "page.test": ["127.0.0.1"]}[host]

    fake.on("GET", "/article", reply_text(ARTICLE_HTML, content_type="text/html"))
    guarded = PageFetcher(timeout_s=1.0, resolver=resolver)
    t = tool([DuckDuckGoProvider(ddgs_factory=FakeDDGS)], fetcher=guarded)
    try:
        with pytest.raises(ToolError, match=r"refusing to fetch mixed\.test \(10\.1\.2\.3\)"):
            await t.fetch(Ctx().ctx, "http://mixed.test/")
        with pytest.raises(ToolError, match=r"page\.test \(127\.0\.0\.1\)"):
            await t.fetch(Ctx().ctx, f"http://page.test:{fake.port}/article")
    finally:
        await t.aclose()
    opened = PageFetcher(timeout_s=1.0, resolver=resolver, allow_private=True)
    page = await opened.fetch_page(f"http://page.test:{fake.port}/article")
    await opened.aclose()
    assert "sea otters" in page.text
    assert fake.requests[-1].headers["Host"] == f"page.test:{fake.port}"


def test_public_address_policy() -> None:
    import ipaddress

    for addr in (
        "127.0.0.1",
        "10.0.0.1",
        "192.168.1.1",
        "172.16.0.1",
        "169.254.169.254",
        "::1",
        "fe80::1",
        "fc00::1",
        "0.0.0.0",
        "224.0.0.1",
        "240.0.0.1",
        "100.64.0.1",
        "::ffff:10.0.0.1",
        "ff02::1",
    ):
        assert not is_public_address(ipaddress.ip_address(addr)), addr
    for addr in ("93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946", "1.1.1.1"):
        assert is_public_address(ipaddress.ip_address(addr)), addr


class DDGSException(Exception):
    """ddgs's own exception class name (the provider reads names, not ddgs's types)."""


@pytest.mark.parametrize(
    "message",
    [
        "DNSError: DNSError('error sending request for url (https://search.yahoo.com/search;_ylt=Y7W?p=w) "
        "> error resolving DNS > DNS error: no records found for Query { name: Name(search.yahoo.com.) }')",
        "ConnectError('error sending request for url (https://search.brave.com/search?q=w)')",
        "engine https://www.mojeek.com/search?q=w answered 500: " + "a very long explanation " * 20,
    ],
)
async def test_a_keyless_failure_names_no_other_engine_and_cuts_no_word(message: str) -> None:
    class Failing:
        def text(self, query: str, **kwargs: Any) -> list[dict[str, Any]]:
            raise DDGSException(message)

        def news(self, query: str, **kwargs: Any) -> list[dict[str, Any]]:
            raise AssertionError("not called")

    with pytest.raises(ProviderError) as caught:
        await DuckDuckGoProvider(ddgs_factory=Failing).search("weather", "web", 1)
    reason = str(caught.value)
    # ddgs asks several engines: a reason naming one of them reads as if that provider had been asked.
    assert "yahoo" not in reason and "brave" not in reason and "mojeek" not in reason, reason
    assert len(reason) <= 160
    assert reason.endswith((")", "…")), reason
    if reason.endswith("…"):
        last_word = reason[:-1].split()[-1]
        assert last_word in message, reason  # a whole word of the message, not a cut one
