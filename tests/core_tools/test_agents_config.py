"""AGENTS_FILE: every kind of bad input is one clear configuration line at start, naming the agent and what
is wrong; a good file becomes agent__NAME tools."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bot.process.parts import config_problems
from bot.process.wiring import build_services
from core_tools.agents import check_tools, load_agents
from tests.support.fakes.openai_api import FakeLLM
from tests.support.harness import make_settings
from tests.support.processes import full_env, run_bot

GOOD: dict[str, Any] = {
    "name": "researcher",
    "description": "Finds things on the web.",
    "system_prompt": "You research.",
    "tools": ["search", "fetch"],
}


def write(tmp_path: Path, data: Any) -> Path:
    path = tmp_path / "agents.json"
    path.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return path


def problem(tmp_path: Path, data: Any) -> str:
    with pytest.raises(ValueError) as caught:
        load_agents(write(tmp_path, data))
    return str(caught.value)


def test_a_good_file_loads_with_its_defaults(tmp_path: Path) -> None:
    (spec,) = load_agents(write(tmp_path, {"agents": [GOOD]}))
    assert spec.tool_name == "agent__researcher" and spec.tools == ("search", "fetch")
    assert spec.model is None and spec.max_tokens is None


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ("{not json", "not valid JSON (Expecting property name enclosed in double quotes at line 1)"),
        ({"agents": {"researcher": GOOD}}, 'expected {"agents": [{"name": ..., "description": ..., ...}]}'),
        ({"agents": [GOOD, GOOD]}, "the agent name 'researcher' is used twice"),
        ({"agents": [{**GOOD, "name": "Researcher"}]}, "`name` must be 1-32 of a-z, 0-9, '_' or '-'"),
        ({"agents": [{**GOOD, "name": "x" * 33}]}, "agent #1: `name` must be 1-32"),
        ({"agents": [{**GOOD, "tools": ["search", "delegate"]}]}, "lists the tool 'delegate', but a helper"),
        ({"agents": [{**GOOD, "tools": ["agent__other"]}]}, "helpers are one level deep"),
        ({"agents": [{**GOOD, "system_prompt": " "}]}, "`system_prompt` must be a non-empty string"),
        ({"agents": [{**GOOD, "max_tokens": 5}]}, "`max_tokens` must be a whole number from 16"),
        ({"agents": [{**GOOD, "tool": ["search"]}]}, "unknown key(s) tool"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path: Path, data: Any, expected: str) -> None:
    message = problem(tmp_path, data)
    assert message.startswith(f"AGENTS_FILE {tmp_path / 'agents.json'}: ")
    assert expected in message


def test_a_missing_file_says_so(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"AGENTS_FILE .*absent\.json: cannot read it \(No such file"):
        load_agents(tmp_path / "absent.json")


def test_tools_must_exist_or_belong_to_a_configured_mcp_server(tmp_path: Path) -> None:
    (spec,) = load_agents(write(tmp_path, {"agents": [{**GOOD, "tools": ["search", "probe__echo"]}]}))
    check_tools([spec], ["search", "fetch"], ["probe"])  # MCP tools are listed once the server connects
    with pytest.raises(ValueError, match="agent 'researcher' lists the tool 'probe__echo', which the bot"):
        check_tools([spec], ["search", "fetch"], [])


def test_config_problems_name_a_bad_file_before_anything_starts(tmp_path: Path) -> None:
    bad = write(tmp_path, "{not json")
    settings = make_settings(tmp_path, None, FakeLLM(), agents_file=str(bad))  # never started: not called
    (line,) = config_problems(settings)
    assert line.startswith(f"Configuration error: AGENTS_FILE {bad}: not valid JSON") and line.endswith(".")


async def test_an_unknown_tool_stops_the_build_with_its_name(tmp_path: Path, llm: FakeLLM) -> None:
    good = write(tmp_path, {"agents": [{**GOOD, "tools": ["search", "web_magic"]}]})
    settings = make_settings(tmp_path, None, llm, agents_file=str(good))
    with pytest.raises(ValueError, match="agent 'researcher' lists the tool 'web_magic'"):
        build_services(settings)


@pytest.mark.slow  # a real `python -m bot` process
async def test_python_m_bot_refuses_to_start_with_an_unknown_tool(tmp_path: Path, llm: FakeLLM) -> None:
    from tests.support.fakes.telegram_api import FakeTelegram

    async with FakeTelegram() as tg:
        path = write(tmp_path, {"agents": [{**GOOD, "tools": ["web_magic"]}]})
        code, out, err = await run_bot(tmp_path, env=full_env(tmp_path, tg, llm, AGENTS_FILE=str(path)))
    assert code == 2, out + err
    assert "Traceback" not in out + err
    assert (
        err.strip()
        .splitlines()[-1]
        .startswith(
            "Configuration error: AGENTS_FILE: agent 'researcher' lists the tool 'web_magic', which the bot "
            "does not have (tools: "
        )
    )
