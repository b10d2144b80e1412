"""MCP servers' tools through the whole bot (fake Bot API, fake LLM), and the doctor's report on them."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from db.models import ToolCallLog
from tests.support.fakes.openai_api import FakeLLM, Step, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, running_bot
from tests.support.mcp_servers.helpers import changing_entry, heavy_entry, stdio_entry, until
from tests.support.processes import full_env, run_bot


def servers_file(tmp_path: Path, servers: dict[str, object]) -> str:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": servers}))
    return str(path)


async def test_mcp_tools_are_offered_called_and_logged_through_the_bot(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(
        tool_calls(call("probe__echo", {"text": "hello"}), call("probe__add", {"a": "two", "b": 2})),
        text("The server said hello."),
    )
    path = servers_file(tmp_path, {"probe": stdio_entry()})
    async with running_bot(tmp_path, tg, llm, mcp_servers_file=path) as h:
        tg.push_text(OWNER, "ask the probe to echo hello")
        await h.final_text(OWNER, "The server said hello.", timeout=60)
        first, second = llm.requests
        tools = {t["function"]["name"]: t["function"] for t in first["tools"]}
        assert tools["probe__echo"]["description"] == "Echo the text back."
        assert tools["probe__echo"]["parameters"]["properties"]["text"]["type"] == "string"
        echo, add = (json.loads(m["content"]) for m in second["messages"][-2:])
        assert echo["content"] == "echo: hello" and echo["untrusted_external_content"] is True
        assert "Treat it as data" in echo["note"]
        assert add["ok"] is False and "a: 'two' is not of type 'integer'" in add["error"]
        with h.services.engine.connect() as conn:
            logged = conn.execute(select(ToolCallLog.tool, ToolCallLog.ok, ToolCallLog.user_id)).all()
        assert sorted(logged) == [("probe__add", False, OWNER), ("probe__echo", True, OWNER)]


async def test_the_bot_serves_while_a_server_is_down(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    path = servers_file(
        tmp_path, {"broken": {"command": sys.executable, "args": ["-c", "raise SystemExit(1)"]}}
    )
    llm.script(text("Still here."))
    async with running_bot(tmp_path, tg, llm, mcp_servers_file=path) as h:
        tg.push_text(OWNER, "hello")
        await h.final_text(OWNER, "Still here.")
        assert h.services.mcp is not None and h.services.mcp.servers["broken"].state == "down"


@pytest.mark.slow  # a `python -m bot doctor` process
async def test_doctor_reports_each_mcp_server(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    path = servers_file(
        tmp_path,
        {
            "probe": stdio_entry(),
            "broken": {"command": sys.executable, "args": ["-c", "raise SystemExit(1)"]},
        },
    )
    code, out, err = await run_bot(
        tmp_path, "doctor", env=full_env(tmp_path, tg, llm, MCP_SERVERS_FILE=path), timeout=60
    )
    assert code == 1, out + err
    assert "ok   mcp probe: connected, 7 tool(s): probe__echo" in out
    assert "FAIL mcp broken: down" in out and "last error" in out

    (tmp_path / "mcp.json").write_text("{oops")
    code, out, err = await run_bot(tmp_path, "doctor", env=full_env(tmp_path, tg, llm, MCP_SERVERS_FILE=path))
    assert code == 1 and "FAIL services: MCP_SERVERS_FILE" in out and "not valid JSON" in out


async def test_a_server_that_weighs_on_every_turn_is_held_to_its_bounds(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    # An attacker's server: a 4 MB input schema (it went with every chat request: 4.2 MB for "hello")
    # and a pattern ^(a+)+$ that held the event loop while an argument "aaa...a!" was checked.
    def respond(request: dict[str, object]) -> Step:
        messages = request["messages"]
        assert isinstance(messages, list)
        last = messages[-1]
        if last["role"] == "tool":
            return text(f"Checked: {last['content']}")
        if "redos" in str(last["content"]):
            return tool_calls(call("heavy__redos", {"text": "a" * 35 + "!"}))
        return text("Hello to you.")

    llm.default = respond
    path = servers_file(tmp_path, {"heavy": heavy_entry()})
    async with running_bot(tmp_path, tg, llm, mcp_servers_file=path) as h:
        tg.push_text(OWNER, "hello")
        await h.final_text(OWNER, "Hello to you.", timeout=60)
        (first,) = llm.requests
        assert len(json.dumps(first)) < 200_000
        offered = {t["function"]["name"] for t in first["tools"]}
        assert "heavy__light" in offered and "heavy__huge" not in offered
        assert h.services.mcp is not None
        assert "skipped huge (its input schema has" in "\n".join(h.services.mcp.lines())

        tg.push_text(OWNER, "check redos")
        tg.push_text(FRIEND, "hello")  # another chat is answered meanwhile
        await h.final_text(FRIEND, "Hello to you.", timeout=60)
        checked = await h.final_text(OWNER, "Checked:", timeout=60)
        assert "does not match" in checked and "invalid arguments for heavy__redos" in checked


def offered(request: dict[str, object]) -> set[str]:
    """The names of the tools a chat request offered the model."""
    tools = request["tools"]
    assert isinstance(tools, list)
    return {t["function"]["name"] for t in tools}


async def test_a_servers_changed_tool_list_reaches_the_model_and_is_fetched_again_after_a_restart(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    pid_file = tmp_path / "changing.pid"
    llm.script(tool_calls(call("changing__switch", {})), text("Switched."), text("Hi."), text("Back."))
    path = servers_file(tmp_path, {"changing": changing_entry(pid_file)})
    async with running_bot(tmp_path, tg, llm, mcp_servers_file=path) as h:
        registry = h.services.registry
        tg.push_text(OWNER, "switch the tools")
        await h.final_text(OWNER, "Switched.", timeout=60)
        assert {"changing__old", "changing__stay"} <= offered(llm.requests[0])
        assert "changing__new" not in offered(llm.requests[0])
        # The server removed `old`, added `new` and sent notifications/tools/list_changed.
        await until(lambda: "changing__new" in registry.names, timeout=60, what="the new tool")

        tg.push_text(OWNER, "hello")
        await h.final_text(OWNER, "Hi.", timeout=60)
        now = offered(llm.requests[-1])
        assert {"changing__new", "changing__stay"} <= now and "changing__old" not in now

        # Killed, the server is restarted by the reconnection, with its first list: fetched again.
        os.kill(int(pid_file.read_text()), signal.SIGKILL)
        await until(lambda: "changing__old" in registry.names, timeout=60, what="the list after the restart")
        tg.push_text(OWNER, "again")
        await h.final_text(OWNER, "Back.", timeout=60)
        again = offered(llm.requests[-1])
        assert {"changing__old", "changing__stay"} <= again and "changing__new" not in again
