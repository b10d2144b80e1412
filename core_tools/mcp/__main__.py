"""`python -m core_tools.mcp --user-id ID [--http HOST:PORT]`: serve our tools over MCP.

Reading settings is bot/'s job, so this hands over to `bot.process.mcp_serve` (the one import from core_tools
into bot, allowed by name in the import-linter contract in pyproject.toml).
"""

from __future__ import annotations

import sys

from bot.process.mcp_serve import main

if __name__ == "__main__":
    sys.exit(main())
