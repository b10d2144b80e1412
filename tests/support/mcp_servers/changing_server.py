"""An MCP server whose tool list changes at run time, for tests: `python changing_server.py [--http PORT]`.

It starts with `stay`, `old` and `switch`; calling `switch` removes `old`, adds `new` and tells the client
the list changed (on a `subscriptions/listen` stream at the 2026 protocol, as a plain
`notifications/tools/list_changed` before it). A restarted process starts again with the first list.
"""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer

app = MCPServer("changing")


@app.tool()
def stay(text: str) -> str:
    """A tool that is always there."""
    return f"stay: {text}"


@app.tool()
def old() -> str:
    """A tool that `switch` removes."""
    return "old"


def new() -> str:
    """A tool that `switch` adds."""
    return "new"


@app.tool()
async def switch(ctx: Context) -> str:
    """Remove `old`, add `new`, and notify the client that the tool list changed."""
    if any(t.name == "old" for t in await app.list_tools()):
        app.remove_tool("old")
        app.add_tool(new)
    await ctx.notify_tools_changed()  # the 2026 protocol: the client's listen stream
    await ctx.session.send_tool_list_changed()  # earlier eras (dropped at 2026)
    return "switched"


if __name__ == "__main__":
    if "--pid-file" in sys.argv:
        import os

        Path(sys.argv[sys.argv.index("--pid-file") + 1]).write_text(str(os.getpid()))
    if "--http" in sys.argv:
        import asyncio

        port = int(sys.argv[sys.argv.index("--http") + 1])
        asyncio.run(app.run_streamable_http_async(host="127.0.0.1", port=port))
    else:
        app.run()
