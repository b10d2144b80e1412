"""Running model-written code: the `code` tool (tool.py, generation.py, slots.py, output.py), what runs learn
from (patterns.py, lessons.py), and `python -m core_tools.code`, the command-line door to the same executor.

Only the sandbox's names are imported here: the CLI loads no database or LLM client."""

from __future__ import annotations

from core_tools.sandbox import ExecutionResult, Executor, LocalExecutor, SandboxLimits, describe

__all__ = ["ExecutionResult", "Executor", "LocalExecutor", "SandboxLimits", "describe"]
