"""Sandboxed code execution: each run gets a fresh bubblewrap sandbox with rlimits, no network, no secrets.

`Executor` is the seam, with three implementations: `LocalExecutor` (bwrap in this process's host,
`executor.py`, with sandboxes started ahead of the run in `launch.py`), `ServiceExecutor` (a sandbox service
over a unix socket or TCP: `client.py`, `protocol.py`, `server.py`, started by `service.py`) and
`SandboxPool` (several services, `pool.py`). See `isolation.py` for how fork bombs are contained when the
bot is root, `cgroup.py` and `watchdog.py` for how one run's memory is bounded as a whole, `limits.py` for
the limits a service announces and the bot follows.
"""

from __future__ import annotations

from core_tools.sandbox.categorize import CATEGORIES, categorize_error
from core_tools.sandbox.executor import LocalExecutor, describe
from core_tools.sandbox.isolation import detect_isolation
from core_tools.sandbox.model import ExecutionResult, Executor, Isolation, SandboxLimits

__all__ = [
    "CATEGORIES",
    "ExecutionResult",
    "Executor",
    "Isolation",
    "LocalExecutor",
    "SandboxLimits",
    "categorize_error",
    "describe",
    "detect_isolation",
]
