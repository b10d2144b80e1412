"""Benchmark of MCP tool calls and paged results: `uv run python bench/bench_mcp.py [--calls 300]`.

1. One call of an instant tool on a stdio MCP server (tests/support/mcp_servers/probe_server.py, written with
   the `mcp` SDK): through our choke point (McpServers + ToolRegistry.call: schema validation, timeout, the
   tool-call log row in SQLite, untrusted marking) next to the bare SDK client calling the same server.
   Target: at most 1.3x.
2. Reading a 1 MB result in pages: the registry stores it, read_result reads it to the end (8,000
   characters a page) from the SQLite database; pages per second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp import Client, StdioServerParameters

from core_tools.mcp.client import McpServers
from core_tools.mcp.config import parse_servers
from core_tools.registry import ToolRegistry
from core_tools.tools.results import ResultsTool
from core_tools.types import ToolCallRequest, ToolContext
from db.conversations import Conversations
from db.engine import make_engine, make_sessionmaker
from db.migrate import upgrade
from db.results import ToolResults
from db.usage import UsageLog

PROBE = str(Path(__file__).resolve().parents[1] / "tests" / "support" / "mcp_servers" / "probe_server.py")


def _ms(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered) * 1000, ordered[round(0.95 * (len(ordered) - 1))] * 1000


async def calls_both(calls: int, registry: ToolRegistry, ctx: ToolContext) -> tuple[list[float], list[float]]:
    """The bare SDK client and our choke point against two processes of the same server, call by call
    alternately, so that a busy machine slows both alike."""
    specs = parse_servers({"mcpServers": {"probe": {"command": sys.executable, "args": [PROBE]}}})
    servers = McpServers(specs, registry)
    await servers.start()
    bare: list[float] = []
    ours: list[float] = []
    try:
        async with Client(StdioServerParameters(command=sys.executable, args=[PROBE])) as client:
            for i in range(calls + 20):  # the first 20 of each warm up
                t = time.perf_counter()
                await client.call_tool("echo", {"text": f"x{i}"})
                b = time.perf_counter() - t
                t = time.perf_counter()
                out = await registry.call(
                    ToolCallRequest(f"c{i}", "probe__echo", json.dumps({"text": f"x{i}"})), ctx
                )
                o = time.perf_counter() - t
                assert out.ok, out.content
                if i >= 20:
                    bare.append(b)
                    ours.append(o)
    finally:
        await servers.aclose()
    return bare, ours


async def pages(registry: ToolRegistry, ctx: ToolContext) -> tuple[int, float]:
    """Store a 1 MB result and read it to its end; (pages, seconds)."""
    text = "".join(f"{i:07d} lorem ipsum dolor sit amet consectetur\n" for i in range(22_000))[:1_000_000]

    async def big(ctx: ToolContext) -> str:
        """A 1 MB text."""
        return text

    registry.register(big)
    first = json.loads((await registry.call(ToolCallRequest("b", "big", "{}"), ctx)).content)
    got, offset, n = [first["page"]], first["next_offset"], 1
    t = time.perf_counter()
    while offset is not None:
        args = json.dumps({"handle": first["handle"], "offset": offset})
        page = json.loads((await registry.call(ToolCallRequest(f"r{n}", "read_result", args), ctx)).content)
        got.append(page["text"])
        offset, n = page["next_offset"], n + 1
    elapsed = time.perf_counter() - t
    assert "".join(got) == text
    return n - 1, elapsed


async def main() -> None:
    """Run both parts and print the figures."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/bench.db"
        upgrade(url)
        engine = make_engine(url)
        sm = make_sessionmaker(engine)
        conv = Conversations(sm, engine)
        conv.ensure_user(1, None, None)
        ctx = ToolContext(user_id=1, chat_id=1, session_id=conv.current_session(1, 1).id)
        registry = ToolRegistry(recorder=UsageLog(sm, engine), results=ToolResults(sm))
        registry.register(ResultsTool(ToolResults(sm)).read_result, paged=False)

        b, o = await calls_both(args.calls, registry, ctx)
        bm, bp = _ms(b)
        om, op = _ms(o)
        print(f"MCP call, instant tool, stdio, {args.calls} calls each, alternating (median / p95):")
        print(f"  bare SDK client       {bm:6.2f} ms / {bp:6.2f} ms")
        print(f"  through choke point   {om:6.2f} ms / {op:6.2f} ms  (incl. the tool-call log row in SQLite)")
        print(f"  ratio (median)        {om / bm:6.2f}x   target <= 1.3x")

        n, seconds = await pages(registry, ctx)
        print(f"1 MB result read by read_result: {n} pages of 8000 chars in {seconds * 1000:.0f} ms")
        print(f"  {n / seconds:,.0f} pages/s, {1_000_000 / seconds / 1e6:.1f} MB/s")
        engine.dispose()


if __name__ == "__main__":
    asyncio.run(main())
