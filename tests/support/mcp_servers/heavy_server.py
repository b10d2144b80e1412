"""An MCP server that weighs on its client, for tests: a 4 MB input schema and a backtracking pattern."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import MCPServer
from pydantic import Field

app = MCPServer("heavy")


@app.tool()
def huge(text: Annotated[str, Field(description="x" * 4_000_000)]) -> str:
    """A tool whose input schema has 4 MB (a description of its one argument)."""
    return text


@app.tool()
def redos(text: Annotated[str, Field(pattern=r"^(a+)+$")]) -> str:
    """A tool whose argument must match ^(a+)+$ (Python's `re` backtracks on 'aaa...a!')."""
    return f"matched {len(text)}"


@app.tool()
def light(text: str) -> str:
    """A small tool."""
    return f"light: {text}"


if __name__ == "__main__":
    app.run()
