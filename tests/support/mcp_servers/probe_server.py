"""An MCP server written with the `mcp` SDK, for tests: `python probe_server.py [--http PORT]`."""

from __future__ import annotations

import asyncio
import json
import os
import sys

from mcp.server.mcpserver import MCPServer

app = MCPServer("probe")


@app.tool()
def echo(text: str) -> str:
    """Echo the text back."""
    return f"echo: {text}"


@app.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@app.tool()
def environment() -> str:
    """The names of the environment variables this server sees, and FOO's value."""
    return json.dumps({"names": sorted(os.environ), "FOO": os.environ.get("FOO")})


@app.tool()
def big(chars: int) -> str:
    """A text of `chars` characters, numbered lines."""
    lines = [f"{i:07d} lorem ipsum dolor sit amet consectetur\n" for i in range(chars // 40 + 1)]
    return "".join(lines)[:chars]


@app.tool()
async def hang() -> str:
    """Never answers."""
    await asyncio.sleep(3600)
    return "late"


@app.tool()
def die() -> str:
    """The server process exits mid-call."""
    os._exit(3)


@app.tool(name="x__echo")
def x_echo(text: str) -> str:
    """A tool whose full name collides with server `NAME__x`'s `echo`."""
    return f"x: {text}"


if __name__ == "__main__":
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        asyncio.run(app.run_streamable_http_async(host="127.0.0.1", port=port))
    else:
        app.run()
