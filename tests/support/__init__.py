"""What the tests share: the loopback fakes, the harness that runs the bot against them, real `python -m bot`
processes, the embedded PostgreSQL, the database choice per test, file builders and the MCP probe servers.

Nothing here is a test, except the fakes' own checks (tests/support/fakes/test_fakes.py). bench/ imports
these too.
"""
