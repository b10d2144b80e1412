"""A 2025-era MCP server without the SDK (JSON-RPC lines on stdio) whose tool list changes, for tests.

Like many servers in use, it knows only the `initialize` handshake (no `server/discover`, no
`subscriptions/listen`): it tells the client of a change with a plain `notifications/tools/list_changed`.
It starts with `stay`, `old`, `switch` and `quietly`; calling `switch` removes `old`, adds `new` and notifies;
`quietly` does the same without notifying.
"""

from __future__ import annotations

import json
import sys
from typing import Any

PROTOCOL = "2025-06-18"
NO_ARGS: dict[str, Any] = {"type": "object", "properties": {}}
TOOLS: dict[str, dict[str, Any]] = {
    "stay": {"description": "A tool that is always there.", "inputSchema": NO_ARGS},
    "old": {"description": "A tool that `switch` removes.", "inputSchema": NO_ARGS},
    "switch": {"description": "Remove `old`, add `new`, notify the client.", "inputSchema": NO_ARGS},
    "quietly": {"description": "Remove `old`, add `new`, tell no one.", "inputSchema": NO_ARGS},
}
NEW = {"description": "A tool that `switch` adds.", "inputSchema": NO_ARGS}


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def answer(request: dict[str, Any]) -> dict[str, Any] | None:
    """The result of a request; None for a method this server does not know."""
    method, params = request["method"], request.get("params") or {}
    if method == "initialize":
        return {
            "protocolVersion": PROTOCOL,
            "capabilities": {"tools": {"listChanged": True}},
            "serverInfo": {"name": "legacy-changing", "version": "1"},
        }
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": [{"name": name, **tool} for name, tool in TOOLS.items()]}
    if method == "tools/call":
        name = params.get("name")
        if name in ("switch", "quietly"):
            TOOLS.pop("old", None)
            TOOLS["new"] = NEW
        if name not in TOOLS:
            return {"content": [{"type": "text", "text": f"unknown tool {name}"}], "isError": True}
        return {
            "content": [{"type": "text", "text": "switched" if name == "switch" else str(name)}],
            "isError": False,
        }
    return None


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message:  # a notification (initialized, cancelled): nothing to answer
            continue
        result = answer(message)
        if result is None:
            send({"id": message["id"], "error": {"code": -32601, "message": "Method not found"}})
            continue
        send({"id": message["id"], "result": result})
        if message["method"] == "tools/call" and message["params"].get("name") == "switch":
            send({"method": "notifications/tools/list_changed"})


if __name__ == "__main__":
    main()
