"""The helper agents file (AGENTS_FILE): `{"agents": [{"name", "description", "system_prompt", "tools",
"model", "max_tokens"}]}`, checked whole at start so a mistake is one clear configuration line."""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NAME = re.compile(r"^[a-z0-9_-]{1,32}$")
AGENT_PREFIX = "agent__"  # each helper is offered to the model as the tool agent__NAME
DELEGATE = "delegate"
_KEYS = {"name", "description", "system_prompt", "tools", "model", "max_tokens"}
_REQUIRED = ("name", "description", "system_prompt")
MAX_PROMPT_CHARS = 20_000  # a system prompt goes with each of the helper's requests
MAX_TOKENS_LIMIT = 1_000_000


@dataclass(frozen=True)
class AgentSpec:
    """One helper agent: offered as `agent__NAME`, it answers a task with its own prompt and tools."""

    name: str
    description: str
    system_prompt: str
    tools: tuple[str, ...] = ()
    model: str | None = None  # None: the chat's model
    max_tokens: int | None = None  # None: LLM_MAX_COMPLETION_TOKENS

    @property
    def tool_name(self) -> str:
        """The name the model calls it by."""
        return AGENT_PREFIX + self.name


def _text(entry: dict[str, Any], key: str, where: str, limit: int) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}: `{key}` must be a non-empty string")
    if len(value) > limit:
        raise ValueError(f"{where}: `{key}` has {len(value)} characters, more than {limit}")
    return value.strip()


def _one(entry: Any, index: int, source: str, description_limit: int) -> AgentSpec:
    where = f"{source}: agent #{index + 1}"
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: expected an object")
    name = entry.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise ValueError(f"{where}: `name` must be 1-32 of a-z, 0-9, '_' or '-' (got {name!r})")
    where = f"{source}: agent {name!r}"
    unknown = set(entry) - _KEYS
    if unknown:
        raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
    description = _text(entry, "description", where, description_limit)
    prompt = _text(entry, "system_prompt", where, MAX_PROMPT_CHARS)
    tools = entry.get("tools", [])
    if not isinstance(tools, list) or not all(isinstance(t, str) and t for t in tools):
        raise ValueError(f"{where}: `tools` must be a list of tool names")
    for tool in tools:
        if tool == DELEGATE or tool.startswith(AGENT_PREFIX):
            raise ValueError(
                f"{where}: lists the tool {tool!r}, but a helper cannot start other helpers "
                "(helpers are one level deep)"
            )
    model = entry.get("model")
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise ValueError(f"{where}: `model` must be a model name")
    max_tokens = entry.get("max_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool)
        or not isinstance(max_tokens, int)
        or not 16 <= max_tokens <= MAX_TOKENS_LIMIT
    ):
        raise ValueError(f"{where}: `max_tokens` must be a whole number from 16 to {MAX_TOKENS_LIMIT}")
    return AgentSpec(name, description, prompt, tuple(dict.fromkeys(tools)), model, max_tokens)


def parse_agents(data: Any, source: str = "AGENTS_FILE", description_limit: int = 1200) -> list[AgentSpec]:
    """The agents of a parsed file; ValueError naming the agent and key when something is wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("agents"), list) or set(data) != {"agents"}:
        raise ValueError(f'{source}: expected {{"agents": [{{"name": ..., "description": ..., ...}}]}}')
    specs = [_one(entry, i, source, description_limit) for i, entry in enumerate(data["agents"])]
    seen: set[str] = set()
    for spec in specs:
        if spec.name in seen:
            raise ValueError(f"{source}: the agent name {spec.name!r} is used twice")
        seen.add(spec.name)
    return specs


def load_agents(path: str | Path, description_limit: int = 1200) -> list[AgentSpec]:
    """Read and check the agents file; ValueError with a clear message when it cannot be used."""
    p = Path(path)
    try:
        raw = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"AGENTS_FILE {p}: cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError:
        raise ValueError(f"AGENTS_FILE {p}: not UTF-8 text") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"AGENTS_FILE {p}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return parse_agents(data, f"AGENTS_FILE {p}", description_limit)


def check_tools(
    specs: Iterable[AgentSpec], known: Collection[str], mcp_servers: Collection[str] = ()
) -> None:
    """ValueError for the first agent that lists a tool the bot does not have.

    `known`: the tools registered at start; an MCP server's tools (`SERVER__TOOL`) are listed by the
    server only once it is connected, so for them the server must be in MCP_SERVERS_FILE.
    """
    for spec in specs:
        for tool in spec.tools:
            server, sep, _ = tool.partition("__")
            if tool in known or (sep and server in mcp_servers):
                continue
            available = ", ".join(sorted(known)) or "none"
            raise ValueError(
                f"AGENTS_FILE: agent {spec.name!r} lists the tool {tool!r}, which the bot does not have "
                f"(tools: {available}; an MCP server's tools are SERVER__TOOL)"
            )
