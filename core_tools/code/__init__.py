"""Running model-written code: `python -m core_tools.code` is the command-line door to the same executor."""

from __future__ import annotations

from core_tools.sandbox import ExecutionResult, Executor, LocalExecutor, SandboxLimits, describe

__all__ = ["ExecutionResult", "Executor", "LocalExecutor", "SandboxLimits", "describe"]
