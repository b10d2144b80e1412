"""CLI: `python -m core_tools.code --language python --timeout 5 < program.py` prints one JSON result.

Plain mode exit status: 0 when the code ran (even if it failed), 1 when the run was refused (no sandbox),
2 on usage errors (bad arguments, unavailable language).

`--json` reads one JSON request on stdin instead of a program, and always writes one JSON object: its
contract and exit codes are in core_tools/code/json_cli.py (0 completed, 1 bad input, 2 refused).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
from typing import Any, NoReturn

from core_tools.code.json_cli import EXIT_INVALID, answer, dump, exit_code, reply
from core_tools.errors import ToolError
from core_tools.sandbox import ExecutionResult, LocalExecutor, SandboxLimits
from core_tools.sandbox.model import FileLimits


class _JsonArgumentParser(argparse.ArgumentParser):
    """In --json mode a usage error is an "invalid" object on stdout too, not argparse's text alone."""

    def error(self, message: str) -> NoReturn:
        _write(reply("invalid", f"bad arguments: {message}"))
        self.exit(EXIT_INVALID)


def _write(obj: dict[str, Any]) -> None:
    """Write one JSON object to stdout as UTF-8, whatever the locale's encoding and the object's text."""
    sys.stdout.flush()
    sys.stdout.buffer.write(dump(obj))
    sys.stdout.buffer.flush()


def _parser(json_mode: bool = False) -> argparse.ArgumentParser:
    """The argument parser (argparse exits with status 2 on usage errors in plain mode)."""
    parser = (_JsonArgumentParser if json_mode else argparse.ArgumentParser)(
        prog="python -m core_tools.code",
        description="Run code read from stdin in the code sandbox and print one JSON object.",
    )
    parser.add_argument("--language", default="python", help="python or javascript (default: python)")
    parser.add_argument("--timeout", type=float, default=None, help="wall-clock seconds (default: 30)")
    parser.add_argument("--allow-unsandboxed", action="store_true", help="run without isolation if no bwrap")
    parser.add_argument("--network", action="store_true", help="give the code network access")
    parser.add_argument(
        "--json", action="store_true", help="read one JSON request (language, code, timeout_ms, files)"
    )
    # Hidden: lets tests and operators point at another bwrap binary (or simulate a missing one).
    parser.add_argument("--bwrap", default=None, help=argparse.SUPPRESS)
    return parser


def _json_main(args: argparse.Namespace) -> int:
    """--json: one request in, one object out, whatever happens."""
    executor = LocalExecutor(
        SandboxLimits(network=args.network), allow_unsandboxed=args.allow_unsandboxed, bwrap_path=args.bwrap
    )

    async def run(
        language: str, code: str, timeout_s: float | None, files: dict[str, bytes] | None, limits: FileLimits
    ) -> ExecutionResult:
        try:
            return await executor.run(code, language, timeout_s, files_in=files, files_out=limits)
        finally:
            await executor.aclose()

    try:
        obj = asyncio.run(answer(sys.stdin.buffer.read(), run, FileLimits()))
    except Exception as exc:  # the contract: one object whatever happens
        obj = reply("error", f"internal error: {type(exc).__name__}")
    _write(obj)
    return exit_code(obj)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run stdin through a LocalExecutor, print the result as JSON."""
    raw_args = sys.argv[1:] if argv is None else argv
    args = _parser("--json" in raw_args).parse_args(raw_args)
    if args.json:
        return _json_main(args)
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
