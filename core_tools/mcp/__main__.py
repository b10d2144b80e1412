"""`python -m core_tools.mcp` was the MCP server's entry point: it is `python -m bot mcp` now.

Serving needs the settings and the services, which are bot/'s (core_tools imports nothing of bot), so this
only says where the server went, for MCP clients still configured with the old command.
"""

from __future__ import annotations

import sys

if __name__ == "__main__":
    command = " ".join(["python -m bot mcp", *sys.argv[1:]])
    print(f"error: the MCP server moved: run `{command}`", file=sys.stderr)
    sys.exit(2)
