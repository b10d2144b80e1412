"""The MCP client against a real MCP server written with the SDK (stdio and Streamable HTTP)."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import Engine, select

from core_tools.mcp.client import McpServers
from core_tools.mcp.config import ServerSpec, load_servers, parse_servers
from core_tools.registry import ToolRegistry
from core_tools.tools.results import ResultsTool
from core_tools.types import ToolCallRequest, ToolContext
from db.conversations import Conversations
from db.engine import make_sessionmaker
from db.models import ToolCallLog
from db.results import ToolResults
from db.usage import UsageLog
from tests.support.mcp_servers.helpers import (
    CHANGING,
    PROBE,
    changing_entry,
    free_port,
    heavy_entry,
    legacy_changing_entry,
    process,
    stdio_entry,
    until,
)


def specs(servers: dict[str, Any]) -> list[ServerSpec]:
    return parse_servers({"mcpServers": servers})


class World:
    def __init__(self, engine: Engine) -> None:
        sm = make_sessionmaker(engine)
        conv = Conversations(sm, engine)
        conv.ensure_user(1, None, None)
        self.ctx = ToolContext(user_id=1, chat_id=1, session_id=conv.current_session(1, 1).id)
        self.engine = engine
        self.registry = ToolRegistry(recorder=UsageLog(sm, engine), results=ToolResults(sm))
        self.registry.register(ResultsTool(ToolResults(sm)).read_result, paged=False)

    async def call(self, name: str, **args: Any) -> dict[str, Any]:
        out = await self.registry.call(ToolCallRequest(f"id-{name}", name, json.dumps(args)), self.ctx)
        result: dict[str, Any] = json.loads(out.content)
        return result

    def logged(self) -> list[ToolCallLog]:
        with self.engine.connect() as conn:
            return list(conn.execute(select(ToolCallLog)).all())  # type: ignore[arg-type]


@pytest.fixture
def world(engine: Engine) -> World:
    return World(engine)


@pytest.fixture
async def servers(world: World) -> AsyncIterator[list[McpServers]]:
    made: list[McpServers] = []
    yield made
    for m in made:
        await m.aclose()


async def start(world: World, made: list[McpServers], entries: dict[str, Any], **kw: Any) -> McpServers:
    mcp = McpServers(specs(entries), world.registry, **kw)
    made.append(mcp)
    await mcp.start()
    return mcp


async def test_stdio_tools_are_registered_validated_called_logged_and_marked_untrusted(
    world: World, servers: list[McpServers], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-bot-secret")  # the bot's secrets must not reach the server
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "123:bot-secret")
    mcp = await start(world, servers, {"probe": stdio_entry(env={"FOO": "bar"})})
    assert mcp.servers["probe"].state == "connected"
    schemas = {s["function"]["name"]: s["function"] for s in world.registry.schemas()}
    assert {"probe__echo", "probe__add", "probe__big", "probe__hang"} <= set(schemas)
    add = schemas["probe__add"]
    assert add["description"] == "Add two integers."
    assert add["parameters"]["required"] == ["a", "b"]

    out = await world.call("probe__add", a=2, b=3)
    assert out["untrusted_external_content"] is True and out["source"] == "MCP server probe"
    assert out["content"] == "5"
    bad = await world.call("probe__add", a="two", b=3)
    assert (
        bad["ok"] is False
        and "invalid arguments for probe__add: a: 'two' is not of type 'integer'" in bad["error"]
    )
    missing = await world.call("probe__add", a=1)
    assert missing["ok"] is False and "'b' is a required property" in missing["error"]

    env = json.loads((await world.call("probe__environment"))["content"])
    assert env["FOO"] == "bar"
    assert "OPENAI_API_KEY" not in env["names"] and "TELEGRAM_BOT_TOKEN" not in env["names"]
    assert set(env["names"]) <= {"FOO", "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LC_CTYPE"}

    rows = world.logged()
    assert [(r.tool, r.ok) for r in rows] == [
        ("probe__add", True),
        ("probe__add", False),
        ("probe__add", False),
        ("probe__environment", True),
    ]
    assert rows[0].user_id == 1 and json.loads(rows[0].result)["content"] == "5"


async def test_a_hanging_tool_times_out_and_the_server_keeps_serving(
    world: World, servers: list[McpServers]
) -> None:
    await start(world, servers, {"probe": stdio_entry()}, call_timeout_s=1.0)
    out = await world.call("probe__hang")
    assert out["ok"] is False and "timed out after 1.0 s" in out["error"]
    assert (await world.call("probe__echo", text="still here"))["content"] == "echo: still here"


async def test_a_1_mb_result_is_stored_and_read_back_by_pages(
    world: World, servers: list[McpServers]
) -> None:
    await start(world, servers, {"probe": stdio_entry()})
    first = await world.call("probe__big", chars=1_000_000)
    assert first["paged"] is True and first["total_chars"] > 1_000_000
    assert first["untrusted_external_content"] is True
    text, offset = first["page"], first["next_offset"]
    while offset is not None:
        page = await world.call("read_result", handle=first["handle"], offset=offset)
        text += page["text"]
        offset = page["next_offset"]
    content = json.loads(text)["content"]
    assert len(content) == 1_000_000 and content.startswith("0000000 lorem") and "0020000 lorem" in content


async def test_a_dying_server_is_reported_retried_and_back(world: World, servers: list[McpServers]) -> None:
    mcp = await start(world, servers, {"probe": stdio_entry()}, backoff_initial_s=0.2)
    died = await world.call("probe__die")
    assert died["ok"] is False and "probe" in died["error"]
    await until(lambda: mcp.servers["probe"].failures >= 1, what="the server to be seen down")
    down = mcp.servers["probe"]
    assert down.last_error
    await until(lambda: mcp.servers["probe"].state == "connected", what="the reconnection")
    assert (await world.call("probe__echo", text="again"))["content"] == "echo: again"


async def test_a_server_that_cannot_start_is_retried_with_backoff_and_others_serve(
    world: World, servers: list[McpServers]
) -> None:
    mcp = await start(
        world,
        servers,
        {
            "broken": {"command": sys.executable, "args": ["-c", "import sys; sys.exit(7)"]},
            "missing": {"command": "/nonexistent/mcp-server"},
            "probe": stdio_entry(allowed_tools=["echo"]),
            "off": stdio_entry(disabled=True),
        },
        backoff_initial_s=0.1,
    )
    await until(lambda: mcp.servers["broken"].failures >= 2, what="a second attempt")
    assert mcp.servers["broken"].state in ("down", "starting")
    assert mcp.servers["missing"].state == "down" and mcp.servers["missing"].last_error
    assert mcp.servers["off"].state == "disabled"
    names = set(world.registry.names)
    assert "probe__echo" in names and "probe__add" not in names  # allowed_tools
    assert not any(n.startswith(("broken__", "off__")) for n in names)
    lines = "\n".join(mcp.lines())
    assert "broken: down" in lines and "off: disabled" in lines and "probe: connected" in lines


async def test_a_colliding_tool_name_is_skipped_and_reported(world: World, servers: list[McpServers]) -> None:
    # "p" has tool "x__echo" -> p__x__echo; "p__x" has tool "echo" -> p__x__echo too.
    mcp = await start(world, servers, {"p": stdio_entry(), "p__x": stdio_entry()})
    owners = [n for n in ("p", "p__x") if "p__x__echo" in mcp.servers[n].tools]
    skipped = [n for n in ("p", "p__x") if mcp.servers[n].skipped]
    assert len(owners) == 1 and len(skipped) == 1 and owners != skipped
    loser = mcp.servers[skipped[0]]
    assert "taken" in next(iter(loser.skipped.values()))
    assert "skipped" in loser.line()
    assert world.registry.names.count("p__x__echo") == 1


async def test_streamable_http_server_with_headers(world: World, servers: list[McpServers]) -> None:
    port = free_port()
    with process([sys.executable, PROBE, "--http", str(port)], port=port):
        mcp = await start(
            world, servers, {"remote": {"url": f"http://127.0.0.1:{port}/mcp", "headers": {"X-Test": "1"}}}
        )
        assert mcp.servers["remote"].state == "connected"
        assert (await world.call("remote__add", a=20, b=22))["content"] == "42"


def test_the_servers_file_is_checked_with_clear_messages(tmp_path: Any) -> None:
    f = tmp_path / "mcp.json"
    f.write_text('{"mcpServers": {"fs": {"command": "npx", "args": ["-y", "server"], "env": {"A": "b"}}}}')
    (spec,) = load_servers(f)
    assert spec.name == "fs" and spec.args == ("-y", "server") and spec.env == {"A": "b"}
    f.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        load_servers(f)
    with pytest.raises(ValueError, match="cannot read it"):
        load_servers(tmp_path / "absent.json")
    with pytest.raises(ValueError, match="either `command`"):
        parse_servers({"mcpServers": {"x": {"args": []}}})
    with pytest.raises(ValueError, match="unknown key"):
        parse_servers({"mcpServers": {"x": {"command": "a", "enviroment": {}}}})
    with pytest.raises(ValueError, match="1-40 letters"):
        parse_servers({"mcpServers": {"bad name": {"command": "a"}}})


async def test_a_schema_of_megabytes_is_skipped_and_reported_and_a_backtracking_pattern_is_harmless(
    world: World, servers: list[McpServers]
) -> None:
    mcp = await start(world, servers, {"heavy": heavy_entry()})
    heavy = mcp.servers["heavy"]
    assert heavy.state == "connected" and heavy.tools == ["heavy__redos", "heavy__light"]
    assert (
        "MCP_MAX_SCHEMA_BYTES" in heavy.skipped["huge"]
        and "skipped huge (its input schema has" in heavy.line()
    )
    # What goes with every chat request stays small.
    assert len(json.dumps(world.registry.schemas())) < 20_000
    # ^(a+)+$ against "aaa...a!" took Python's `re` ~2**35 steps; RE2 answers at once.
    bad = await world.call("heavy__redos", text="a" * 35 + "!")
    assert bad["ok"] is False and "does not match '^(a+)+$'" in bad["error"]
    assert (await world.call("heavy__redos", text="aaaa"))["content"] == "matched 4"


async def test_tools_past_the_total_schema_bytes_are_skipped_and_reported(
    world: World, servers: list[McpServers]
) -> None:
    mcp = await start(world, servers, {"probe": stdio_entry()}, max_tools_bytes=700)
    probe = mcp.servers["probe"]
    assert probe.tools and probe.skipped
    assert all("MCP_MAX_TOOLS_BYTES" in why for why in probe.skipped.values())
    assert {s["function"]["name"] for s in world.registry.schemas()} >= set(probe.tools)
    assert not {f"probe__{t}" for t in probe.skipped} & set(world.registry.names)


@pytest.mark.parametrize("era", ["2026 (subscriptions/listen)", "2025 (a plain notification)"])
async def test_a_changed_tool_list_is_fetched_again(
    world: World, servers: list[McpServers], tmp_path: Any, era: str
) -> None:
    entry = changing_entry(tmp_path / "pid") if era.startswith("2026") else legacy_changing_entry()
    # No ping for the test's length: only the server's notification can make the list current.
    mcp = await start(world, servers, {"srv": entry}, ping_interval_s=3600)
    assert {"srv__stay", "srv__old", "srv__switch"} <= set(world.registry.names)
    assert "srv__new" not in world.registry.names
    assert "switch" in (await world.call("srv__switch"))["content"]
    await until(lambda: "srv__new" in world.registry.names, timeout=30, what="the new tool")
    assert "srv__old" not in world.registry.names and "srv__stay" in world.registry.names
    assert mcp.servers["srv"].tools[-1] == "srv__new"
    assert (await world.call("srv__new"))["content"] == "new"
    gone = await world.call("srv__old")
    assert gone["ok"] is False and "srv__old" in gone["error"]


async def test_a_changed_tool_list_is_fetched_again_over_streamable_http(
    world: World, servers: list[McpServers]
) -> None:
    port = free_port()
    with process([sys.executable, CHANGING, "--http", str(port)], port=port):
        url = f"http://127.0.0.1:{port}/mcp"
        await start(world, servers, {"srv": {"url": url}}, ping_interval_s=3600)
        assert "srv__old" in world.registry.names
        assert "switch" in (await world.call("srv__switch"))["content"]
        await until(lambda: "srv__new" in world.registry.names, timeout=30, what="the new tool")
        assert "srv__old" not in world.registry.names


async def test_a_change_the_server_does_not_announce_is_seen_at_the_next_ping(
    world: World, servers: list[McpServers]
) -> None:
    await start(world, servers, {"srv": legacy_changing_entry()}, ping_interval_s=0.5)
    assert "srv__old" in world.registry.names
    await world.call("srv__quietly")
    await until(lambda: "srv__new" in world.registry.names, timeout=30, what="the new tool")
    assert "srv__old" not in world.registry.names
