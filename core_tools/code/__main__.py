"""CLI: `python -m core_tools.code --language python --timeout 5 < program.py` prints one JSON result.

Exit status: 0 when the code ran (even if it failed), 1 when the run was refused (no sandbox), 2 on
usage errors (bad arguments, unavailable language).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys

from core_tools.errors import ToolError
from core_tools.sandbox import LocalExecutor, SandboxLimits


def _parser() -> argparse.ArgumentParser:
    """The argument parser (argparse exits with status 2 on usage errors)."""
    parser = argparse.ArgumentParser(
        prog="python -m core_tools.code",
        description="Run code read from stdin in the code sandbox and print one JSON object.",
    )
    parser.add_argument("--language", default="python", help="python or javascript (default: python)")
    parser.add_argument("--timeout", type=float, default=None, help="wall-clock seconds (default: 30)")
    parser.add_argument("--allow-unsandboxed", action="store_true", help="run without isolation if no bwrap")
    parser.add_argument("--network", action="store_true", help="give the code network access")
    # Hidden: lets tests and operators point at another bwrap binary (or simulate a missing one).
    parser.add_argument("--bwrap", default=None, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run stdin through a LocalExecutor, print the result as JSON."""
    args = _parser().parse_args(argv)
    if args.timeout is not None and args.timeout <= 0:
        print("error: --timeout must be positive", file=sys.stderr)
        return 2
    code = sys.stdin.buffer.read().decode("utf-8", errors="replace")
    executor = LocalExecutor(
        SandboxLimits(network=args.network), allow_unsandboxed=args.allow_unsandboxed, bwrap_path=args.bwrap
    )
    try:
        result = asyncio.run(executor.run(code, args.language, args.timeout))
    except ToolError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(dataclasses.asdict(result), ensure_ascii=False))
    return 1 if result.error_category == "refused" else 0


if __name__ == "__main__":
    sys.exit(main())
