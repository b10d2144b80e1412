"""`python -m bot mcp`: the SDK's client against our server, over stdio and Streamable HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import httpx2
import mcp_types
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from sqlalchemy import create_engine, insert, select

from db.migrate import upgrade
from db.models import CodeExecution, LLMCall, ToolCallLog
from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, STRANGER
from tests.support.mcp_servers.helpers import free_port, process
from tests.support.processes import full_env

pytestmark = pytest.mark.slow  # real `python -m bot mcp` processes

SERVED = {"search", "fetch", "code", "memory", "read_result"}
TOKEN = "mcp-test-token-0123456789abcdef"


def entry(*args: str) -> list[str]:
    return [sys.executable, "-m", "bot", "mcp", *args]


def db_rows(tmp_path: Path, model: type) -> list[object]:
    engine = create_engine(f"sqlite:///{tmp_path / 'data' / 'assistant.db'}")
    try:
        with engine.connect() as conn:
            return list(conn.execute(select(model)).all())
    finally:
        engine.dispose()


async def test_stdio_server_serves_our_tools_as_the_user(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    env = full_env(tmp_path, tg, llm)
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bot", "mcp", "--user-id", str(OWNER)],
        env=env,
        cwd=str(tmp_path),
    )
    async with Client(params) as client:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == SERVED
        assert "read_result" in (listed["code"].description or "")
        assert listed["code"].input_schema["properties"]["action"]["enum"] == [
            "execute",
            "generate",
            "status",
            "failures",
        ]
        # Each tool says what it reads and writes (issue 25): in _meta, and as the standard hints.
        assert listed["search"].meta == {"capabilities": {"reads": ["internet"], "writes": []}}
        search_hints = listed["search"].annotations
        assert search_hints is not None and search_hints.read_only_hint and search_hints.open_world_hint
        assert listed["code"].meta == {"capabilities": {"reads": ["files"], "writes": ["files", "execution"]}}
        code_hints = listed["code"].annotations
        assert code_hints is not None and not code_hints.read_only_hint
        assert listed["memory"].meta == {"capabilities": {"reads": ["memory"], "writes": ["memory"]}}

        ran = await client.call_tool("code", {"action": "execute", "code": "print(6 * 7)"})
        assert not ran.is_error
        result = json.loads(ran.content[0].text)  # type: ignore[union-attr]
        assert result["stdout"] == "42\n" and result["isolation"] == "bwrap"

        stored = await client.call_tool(
            "memory", {"action": "store", "layer": "long", "content": "Ann likes tea"}
        )
        assert not stored.is_error, stored
        listed_memories = await client.call_tool("memory", {"action": "list"})
        assert "Ann likes tea" in listed_memories.content[0].text  # type: ignore[union-attr]

        bad = await client.call_tool("code", {"action": "dance"})
        assert bad.is_error and "invalid arguments for code" in bad.content[0].text  # type: ignore[union-attr]

    (run,) = db_rows(tmp_path, CodeExecution)
    assert run.user_id == OWNER and run.session_id  # type: ignore[attr-defined]
    logged = db_rows(tmp_path, ToolCallLog)
    assert {r.user_id for r in logged} == {OWNER}  # type: ignore[attr-defined]
    assert [r.tool for r in logged] == ["code", "memory", "memory", "code"]  # type: ignore[attr-defined]


def test_the_server_refuses_bad_starts(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    env = full_env(tmp_path, tg, llm)
    no_token = subprocess.run(
        entry("--user-id", str(OWNER), "--http", "127.0.0.1:8765"),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert no_token.returncode == 2 and "needs MCP_SERVER_TOKEN" in no_token.stderr
    stranger = subprocess.run(
        entry("--user-id", str(STRANGER)), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert stranger.returncode == 2 and "not in ALLOWED_USER_IDS" in stranger.stderr


async def test_http_server_requires_the_bearer_token(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    port = free_port()
    env = full_env(tmp_path, tg, llm, MCP_SERVER_TOKEN=TOKEN)
    url = f"http://127.0.0.1:{port}/mcp"
    with process(entry("--user-id", str(OWNER), "--http", f"127.0.0.1:{port}"), port=port, env=env) as proc:
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        }
        headers = {"Accept": "application/json, text/event-stream"}
        async with httpx.AsyncClient(timeout=10) as raw:
            missing = await raw.post(url, json=init, headers=headers)
            wrong = await raw.post(url, json=init, headers={**headers, "Authorization": "Bearer nope"})
        assert missing.status_code == 401 and wrong.status_code == 401
        assert missing.headers["www-authenticate"].startswith("Bearer")

        async with (
            httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"}) as http,
            Client(streamable_http_client(url, http_client=http)) as client,
        ):
            assert {t.name for t in (await client.list_tools()).tools} == SERVED
            ran = await client.call_tool("code", {"action": "execute", "code": "print('over http')"})
            assert json.loads(ran.content[0].text)["stdout"] == "over http\n"  # type: ignore[union-attr]
        assert proc.poll() is None


async def test_the_users_caps_hold_over_mcp(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    env = full_env(tmp_path, tg, llm, BUDGET_DAILY_TOKENS="1000")
    url = f"sqlite:///{tmp_path / 'data' / 'assistant.db'}"
    upgrade(url)
    engine = create_engine(url)
    with engine.begin() as conn:  # the user spent their day's tokens in Telegram
        conn.execute(
            insert(LLMCall).values(
                user_id=OWNER, purpose="chat", model="m", prompt_tokens=1500, created_at=datetime.now(UTC)
            )
        )
    engine.dispose()
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bot", "mcp", "--user-id", str(OWNER)],
        env=env,
        cwd=str(tmp_path),
    )
    async with Client(params) as client:
        refused = await client.call_tool("code", {"action": "execute", "code": "print(1)"})
    assert refused.is_error and "Usage cap reached" in refused.content[0].text  # type: ignore[union-attr]
    assert db_rows(tmp_path, CodeExecution) == []


async def test_tools_serves_only_the_named_tools(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bot", "mcp", "--user-id", str(OWNER), "--tools", "memory,schedule"],
        env=full_env(tmp_path, tg, llm),
        cwd=str(tmp_path),
    )
    async with Client(params) as client:
        assert {t.name for t in (await client.list_tools()).tools} == {"memory", "schedule"}
        refused = await client.call_tool("code", {"action": "execute", "code": "print(1)"})
        assert refused.is_error and "unknown tool 'code'" in refused.content[0].text  # type: ignore[union-attr]
        listed = await client.call_tool("memory", {"action": "list"})
        assert not listed.is_error, listed
    assert db_rows(tmp_path, CodeExecution) == []


def test_tools_with_an_unknown_name_is_refused_at_start(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    refused = subprocess.run(
        entry("--user-id", str(OWNER), "--tools", "code,nope"),
        env=full_env(tmp_path, tg, llm),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2, refused.stderr
    assert "--tools: no tool named 'nope'; the bot has: " in refused.stderr and "memory" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_the_old_entry_point_says_where_the_server_went(tmp_path: Path) -> None:
    old = subprocess.run(
        [sys.executable, "-m", "core_tools.mcp", "--user-id", "1"],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert old.returncode == 2 and "run `python -m bot mcp --user-id 1`" in old.stderr


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_approve_tools_asks_through_the_client_or_refuses(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, mode: Any
) -> None:
    """Issue 31 §17: APPROVE_TOOLS did not apply to `python -m bot mcp`. A client that supports elicitation is
    asked (approve / deny / always); one that does not gets a clear error, and nothing runs. On the
    2026-07-28 protocol ("auto") the question rides an input-required result and the client's retry; on the
    handshake versions ("legacy") it is a request of the server's while the call waits."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "bot", "mcp", "--user-id", str(OWNER)],
        env=full_env(tmp_path, tg, llm, APPROVE_TOOLS="memory"),
        cwd=str(tmp_path),
    )
    async with Client(params, mode=mode) as plain:  # no elicitation callback: it cannot ask
        refused = await plain.call_tool("memory", {"action": "list"})
        assert refused.is_error
        assert "needs the user's approval (APPROVE_TOOLS), and this MCP client cannot ask for it" in (
            refused.content[0].text  # type: ignore[union-attr]
        )
        ran = await plain.call_tool("code", {"action": "execute", "code": "print(1)"})
        assert not ran.is_error  # a tool that needs no approval runs as before
    assert [r.tool for r in db_rows(tmp_path, ToolCallLog)] == ["code"]  # type: ignore[attr-defined]

    answers = [
        mcp_types.ElicitResult(action="decline"),
        mcp_types.ElicitResult(action="accept", content={"decision": "deny"}),
        mcp_types.ElicitResult(action="accept", content={"decision": "approve"}),
        mcp_types.ElicitResult(action="accept", content={"decision": "always"}),
    ]
    asked: list[str] = []

    async def elicit(
        context: Any, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        asked.append(params.message)
        return answers[len(asked) - 1]

    async with Client(params, mode=mode, elicitation_callback=elicit) as client:
        for _ in range(2):  # declined, then denied
            denied = await client.call_tool("memory", {"action": "store", "content": "Ann likes tea"})
            assert denied.is_error and "denied by the user" in denied.content[0].text  # type: ignore[union-attr]
        stored = await client.call_tool(
            "memory", {"action": "store", "layer": "long", "content": "Ann likes tea"}
        )
        assert not stored.is_error, stored
        listed = await client.call_tool("memory", {"action": "list"})  # always: not asked again
        assert "Ann likes tea" in listed.content[0].text  # type: ignore[union-attr]
        listed = await client.call_tool("memory", {"action": "list"})
        assert not listed.is_error and len(asked) == 4
    assert asked[0].startswith('May I run memory?\n\naction: "store"\ncontent: "Ann likes tea"')
