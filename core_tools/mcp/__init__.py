"""The Model Context Protocol: other servers' tools in our registry (client), our tools to other clients
(server, run by `python -m bot mcp`)."""
