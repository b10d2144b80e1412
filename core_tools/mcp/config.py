"""The MCP servers file: the widely used `{"mcpServers": {NAME: {...}}}` shape, plus our own keys."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The tools `python -m bot mcp` serves unless `--tools` names others.
SERVED_TOOLS = ("search", "fetch", "code", "memory", "read_result")

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,40}$")
# What a stdio server's environment is when its entry names nothing: the MCP SDK passes only these few
# harmless variables of ours (HOME, LOGNAME, PATH, SHELL, TERM, USER), never the bot's secrets.
_KNOWN = {
    "command",
    "args",
    "env",
    "cwd",
    "url",
    "headers",
    "allowed_tools",
    "disabled",
    "type",
    "transport",
    "confirm",
}


@dataclass(frozen=True)
class ServerSpec:
    """One server entry: stdio (`command`, `args`, `env`) or Streamable HTTP (`url`, `headers`)."""

    name: str
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    cwd: str | None = None
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    allowed_tools: frozenset[str] | None = None  # None: every tool the server lists
    disabled: bool = False
    # Ask the user before each call: True for every tool, a regular expression for the tools whose names
    # (the server's own, without the NAME__ prefix) it matches anywhere (re.search), as llm-functions does.
    confirm: bool | re.Pattern[str] = False

    def confirms(self, tool: str) -> bool:
        """Whether a call of the server's tool `tool` needs the user's approval."""
        if isinstance(self.confirm, re.Pattern):
            return self.confirm.search(tool) is not None
        return self.confirm

    @property
    def transport(self) -> str:
        """ "stdio" or "http"."""
        return "http" if self.url else "stdio"

    def describe(self) -> str:
        """Where the server is, without header values or env values (they may be secrets)."""
        if self.url:
            return f"{self.url} (Streamable HTTP)"
        return f"{self.command} {' '.join(self.args)} (stdio)".replace("  ", " ")


def _strings(value: Any, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise ValueError(f"{what} must be an object of strings")
    return {str(k): v for k, v in value.items()}


def _confirm(value: Any, where: str) -> bool | re.Pattern[str]:
    """`confirm`: true/false, or a regular expression over the server's tool names."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value:
        try:
            return re.compile(value)
        except re.error as exc:
            raise ValueError(f"{where}: `confirm` is not a valid regular expression ({exc})") from None
    raise ValueError(f"{where}: `confirm` must be true, false or a regular expression over tool names")


def parse_servers(data: Any, source: str = "MCP_SERVERS_FILE") -> list[ServerSpec]:
    """The servers of a parsed file; ValueError naming the entry and key when something is wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("mcpServers"), dict):
        raise ValueError(f'{source}: expected {{"mcpServers": {{"name": {{...}}}}}}')
    specs: list[ServerSpec] = []
    for name, entry in data["mcpServers"].items():
        where = f"{source}: server {name!r}"
        if not _NAME.match(name):
            raise ValueError(f"{where}: a name is 1-40 letters, digits, '_' or '-'")
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: expected an object")
        unknown = set(entry) - _KNOWN
        if unknown:
            raise ValueError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}")
        command, url = entry.get("command"), entry.get("url")
        if bool(command) == bool(url):
            raise ValueError(f"{where}: give either `command` (stdio) or `url` (Streamable HTTP)")
        args = entry.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise ValueError(f"{where}: `args` must be a list of strings")
        allowed = entry.get("allowed_tools")
        if allowed is not None and (
            not isinstance(allowed, list) or not all(isinstance(a, str) for a in allowed)
        ):
            raise ValueError(f"{where}: `allowed_tools` must be a list of tool names")
        confirm = _confirm(entry.get("confirm", False), where)
        if url is not None and not (isinstance(url, str) and url.startswith(("http://", "https://"))):
            raise ValueError(f"{where}: `url` must be an http(s) URL")
        specs.append(
            ServerSpec(
                name=name,
                command=command if isinstance(command, str) else None,
                args=tuple(args),
                env=_strings(entry.get("env"), f"{where}: `env`"),
                cwd=entry.get("cwd") if isinstance(entry.get("cwd"), str) else None,
                url=url,
                headers=_strings(entry.get("headers"), f"{where}: `headers`"),
                allowed_tools=frozenset(allowed) if allowed is not None else None,
                disabled=bool(entry.get("disabled", False)),
                confirm=confirm,
            )
        )
    return specs


def load_servers(path: str | Path) -> list[ServerSpec]:
    """Read and check the servers file; ValueError with a clear message when it cannot be used."""
    p = Path(path)
    try:
        raw = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ValueError(f"MCP_SERVERS_FILE {p}: cannot read it ({exc.strerror or exc})") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"MCP_SERVERS_FILE {p}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return parse_servers(data, f"MCP_SERVERS_FILE {p}")
