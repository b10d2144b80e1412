"""The Model Context Protocol: other servers' tools in our registry (client), our tools to other clients
(server, `python -m core_tools.mcp`)."""
