"""Search tool overhead against a local fake SearXNG, next to a bare httpx GET; and failover time on a hang.

Run from the repository root: `uv run python bench/bench_search.py [--n 200] [--timeout 1.0]`.
Prints figures; it is not a test. All traffic stays on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(
    0, str(Path(__file__).resolve().parents[1])
)  # so `core_tools` and `tests` import from a checkout

from core_tools.tools.search import SearchTool
from core_tools.tools.search_providers.brave import BraveProvider
from core_tools.tools.search_providers.searxng import SearxngProvider
from core_tools.types import ToolContext
from tests.support.fakes.search import (
    FakeServer,
    brave_result,
    brave_web_payload,
    hang,
    reply_json,
    searxng_payload,
    searxng_result,
)

CTX = ToolContext(user_id=0, chat_id=0, session_id="bench")


def _payload() -> dict[str, object]:
    # Ten realistic results: HTML in snippets, a tracking parameter, a duplicate, some dates.
    results = [
        searxng_result(
            f"https://site{i}.example.com/article/{i}?utm_source=feed&id={i}",
            f"Result <b>{i}</b> about otters",
            f"<p>Sea otters &amp; tools, part {i}. " + "Lorem ipsum dolor sit amet. " * 8 + "</p>",
            f"2024-05-{i + 1:02d}T10:00:00" if i % 2 else None,
        )
        for i in range(10)
    ]
    results.append(searxng_result("https://site1.example.com/article/1/?id=1&fbclid=x", "dup", "dup"))
    return searxng_payload(results)


def _summary(label: str, samples: list[float]) -> tuple[float, float]:
    ms = sorted(s * 1000 for s in samples)
    median = statistics.median(ms)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    print(f"  {label:<28} median {median:7.3f} ms   p95 {p95:7.3f} ms   (n={len(ms)})")
    return median, p95


async def bench_overhead(n: int) -> None:
    """Median and p95 of tool.search (cache off, distinct queries) vs a bare GET and a GET + json()."""
    server = FakeServer()
    await server.start()
    server.on("GET", "/search", reply_json(_payload()))
    async with httpx.AsyncClient(timeout=httpx.Timeout(8.0, connect=3.0), trust_env=False) as client:
        tool = SearchTool([SearxngProvider(client, server.base_url)], cache_ttl_s=0)
        url = f"{server.base_url}/search"
        bare: list[float] = []
        bare_json: list[float] = []
        full: list[float] = []
        for i in range(20):  # warm up connections and code paths
            await client.get(url, params={"q": f"warm {i}", "format": "json", "categories": "general"})
            await tool.search(CTX, f"warm {i}")
        # Interleaved so that drift (other processes on the 2 shared cores) hits all three alike.
        for i in range(n):
            params = {"q": f"otters {i}", "format": "json", "categories": "general"}
            t0 = time.perf_counter()
            await client.get(url, params=params)
            bare.append(time.perf_counter() - t0)

            t0 = time.perf_counter()
            (await client.get(url, params=params)).json()
            bare_json.append(time.perf_counter() - t0)

            t0 = time.perf_counter()
            out = await tool.search(CTX, f"otters {i}")
            full.append(time.perf_counter() - t0)
            assert len(out["results"]) == 5
        await tool.aclose()
    await server.close()
    print(f"Overhead per search, fake SearXNG on 127.0.0.1, cache off, {n} distinct queries:")
    b_med, b_p95 = _summary("bare httpx GET", bare)
    _summary("bare httpx GET + .json()", bare_json)
    t_med, t_p95 = _summary("SearchTool.search", full)
    print(f"  ratio tool/bare GET: median {t_med / b_med:.2f}x, p95 {t_p95 / b_p95:.2f}x (target <= 1.5x)")


async def bench_failover(timeout_s: float, runs: int = 3) -> None:
    """Time for a search whose first provider hangs and whose second answers."""
    hanging = FakeServer()
    answering = FakeServer()
    await hanging.start()
    await answering.start()
    hanging.on("GET", "/search", hang(hanging))
    answering.on(
        "GET", "/res/v1/web/search", reply_json(brave_web_payload([brave_result("https://b.example/")]))
    )
    async with httpx.AsyncClient(timeout=httpx.Timeout(8.0, connect=3.0), trust_env=False) as client:
        tool = SearchTool(
            [
                SearxngProvider(client, hanging.base_url),
                BraveProvider(client, "bench-key", base_url=answering.base_url),
            ],
            cache_ttl_s=0,
            timeout_s=timeout_s,
        )
        print(f"Failover when the first provider hangs (provider timeout {timeout_s:g} s):")
        for i in range(runs):
            t0 = time.perf_counter()
            out = await tool.search(CTX, f"failover {i}")
            elapsed = time.perf_counter() - t0
            print(
                f"  run {i + 1}: {elapsed:.3f} s -> answered by {out['provider']}, "
                f"{elapsed - timeout_s:+.3f} s over the timeout; "
                f"searxng: {out['failed_providers']['searxng']}"
            )
        await tool.aclose()
    await hanging.close()
    await answering.close()


async def main() -> None:
    """Run both benchmarks."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=200, help="searches to time")
    parser.add_argument("--timeout", type=float, default=1.0, help="provider timeout for the failover run")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the failover run logs one expected warning per search
    await bench_overhead(args.n)
    await bench_failover(args.timeout)


if __name__ == "__main__":
    asyncio.run(main())
