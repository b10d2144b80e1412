"""Sandboxed code execution: each run gets a fresh bubblewrap sandbox with rlimits, no network, no secrets.

`Executor` is the seam (a later out-of-process service implements it too); `LocalExecutor` is the
in-process implementation. See `isolation.py` for how fork bombs are contained when the bot is root,
`cgroup.py` and `watchdog.py` for how one run's memory is bounded as a whole.
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
