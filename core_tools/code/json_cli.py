"""The code CLI's JSON contract: one JSON request on stdin, always one JSON object on stdout.

Request: `{"language": "python", "code": "...", "timeout_ms": 5000, "files": {"data.csv": "a,b\\n1,2\\n"}}`
(`language` and `code` required; `files` are text, readable by the program under in/<name>).

Exit codes: 0 the run completed (`success` says whether the program succeeded), 1 the input could not be
parsed or misses a required field, 2 the run was refused for isolation or security (no sandbox, a language
that is not installed, a file name that leaves in/, files over the limits), 3 an unexpected internal error.
Every object has `status` ("completed", "invalid", "refused", "error"); all but "completed" carry `error`.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from core_tools.errors import ToolError
from core_tools.sandbox import ExecutionResult
from core_tools.sandbox.model import FileLimits

EXIT_COMPLETED, EXIT_INVALID, EXIT_REFUSED, EXIT_ERROR = 0, 1, 2, 3
FIELDS = {"language": str, "code": str, "timeout_ms": int, "files": dict}
REQUIRED = ("language", "code")

Runner = Callable[[str, str, float | None, dict[str, bytes] | None, FileLimits], Awaitable[ExecutionResult]]


@dataclass(frozen=True)
class Request:
    """A parsed, checked request."""

    language: str
    code: str
    timeout_s: float | None
    files: dict[str, bytes]


class Rejected(Exception):
    """A request that is not run: `status` is "invalid" (exit 1) or "refused" (exit 2)."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


def reply(status: str, error: str, **extra: Any) -> dict[str, Any]:
    """The object written for a request that did not complete."""
    return {"status": status, "success": False, "error": error, **extra}


def dump(obj: dict[str, Any]) -> bytes:
    """The object as one line of UTF-8 JSON: text that UTF-8 cannot carry (a lone surrogate from the input)
    is written as a JSON escape instead of failing the write."""
    try:
        return (json.dumps(obj, ensure_ascii=False) + "\n").encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(obj) + "\n").encode("ascii")


def exit_code(obj: dict[str, Any]) -> int:
    """The exit code that goes with an answer object."""
    return {"completed": EXIT_COMPLETED, "invalid": EXIT_INVALID, "refused": EXIT_REFUSED}.get(
        str(obj.get("status")), EXIT_ERROR
    )


def _file_name_problem(name: str) -> str | None:
    """Why `name` cannot be a file under in/, or None: a plain name, no path."""
    if not name or name in (".", ".."):
        return "an empty name or a dot"
    if "/" in name or "\\" in name or "\x00" in name:
        return "a path: only plain names are allowed (nothing may be written outside in/)"
    if len(name.encode()) > 255:
        return "longer than 255 bytes"
    return None


def parse_request(raw: bytes, limits: FileLimits) -> Request:
    """The request in `raw`, or Rejected: "invalid" for bad JSON, types or fields, "refused" for file names
    that leave in/ or files over the limits."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise Rejected("invalid", f"the input is not UTF-8: {exc.reason} at byte {exc.start}") from None
    except json.JSONDecodeError as exc:
        raise Rejected("invalid", f"the input is not JSON: {exc.msg} at position {exc.pos}") from None
    except RecursionError:
        raise Rejected("invalid", "the input is not usable JSON: nested too deeply") from None
    except ValueError:  # an integer past Python's int-string limit (4,300 digits)
        digits = sys.get_int_max_str_digits()
        message = f"the input is not usable JSON: a number has more than {digits} digits"
        raise Rejected("invalid", message) from None
    if not isinstance(data, dict):
        raise Rejected("invalid", "the input must be one JSON object")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        names = ", ".join(n.encode("utf-8", "backslashreplace").decode("utf-8") for n in unknown)
        raise Rejected("invalid", f"unknown field(s): {_short(names)}; known: {', '.join(FIELDS)}")
    missing = [f for f in REQUIRED if f not in data or data[f] is None]
    if missing:
        raise Rejected("invalid", f"missing required field(s): {', '.join(missing)}")
    for name, kind in FIELDS.items():
        value = data.get(name)
        # bool is an int in Python, never a timeout.
        if value is not None and (not isinstance(value, kind) or isinstance(value, bool)):
            raise Rejected("invalid", f"field {name!r} must be a JSON {_json_kind(kind)}")
    for name in REQUIRED:
        _check_text(data[name], f"field {name!r}")
    if not data["code"].strip():
        raise Rejected("invalid", "field 'code' is empty")
    timeout_ms = data.get("timeout_ms")
    if timeout_ms is not None and timeout_ms <= 0:
        raise Rejected("invalid", "field 'timeout_ms' must be a positive number of milliseconds")
    try:
        timeout_s = None if timeout_ms is None else timeout_ms / 1000
    except OverflowError:  # 10**400: no float holds it
        raise Rejected("invalid", "field 'timeout_ms' is too large to be a number of milliseconds") from None
    files: dict[str, bytes] = {}
    for name, content in (data.get("files") or {}).items():
        _check_text(name, "a file name")
        if not isinstance(content, str):
            raise Rejected("invalid", f"file {name!r}: its content must be a JSON string")
        _check_text(content, f"file {name!r}")
        problem = _file_name_problem(name)
        if problem is not None:
            raise Rejected("refused", f"file name {name!r} refused: {problem}")
        files[name] = content.encode("utf-8")
    if len(files) > limits.max_files:
        raise Rejected("refused", f"{len(files)} files refused: at most {limits.max_files}")
    total = sum(len(b) for b in files.values())
    if total > limits.max_bytes:
        raise Rejected("refused", f"files of {total} bytes refused: at most {limits.max_bytes} in all")
    return Request(data["language"], data["code"], timeout_s, files)


def _check_text(value: str, what: str) -> None:
    """Rejected when `value` is not text that UTF-8 can carry (a lone surrogate such as \\ud800)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        message = f"{what} is not text: a lone surrogate {value[exc.start]!a} at position {exc.start}"
        raise Rejected("invalid", message) from None


def _short(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else f"{text[:limit]}..."


def _json_kind(kind: type) -> str:
    return {str: "string", int: "integer", dict: "object"}[kind]


def completed(result: ExecutionResult) -> dict[str, Any]:
    """The object of a run that happened (whatever the program did); a refused run says so instead."""
    fields = dataclasses.asdict(result)
    fields["files_out"] = [
        {"name": f.name, "bytes": len(f.data), "base64": base64.b64encode(f.data).decode("ascii")}
        for f in result.files_out
    ]
    if result.error_category == "refused":
        return reply("refused", result.stderr, **{k: v for k, v in fields.items() if k != "success"})
    return {"status": "completed", **fields}


async def answer(raw: bytes, run: Runner, limits: FileLimits) -> dict[str, Any]:
    """The one object for one request: never raises."""
    try:
        request = parse_request(raw, limits)
    except Rejected as exc:
        return reply(exc.status, str(exc))
    except Exception as exc:  # the contract: one object whatever happens
        return reply("error", f"internal error: {type(exc).__name__}: {_short(str(exc))}")
    try:
        result = await run(request.language, request.code, request.timeout_s, request.files or None, limits)
    except ToolError as exc:  # a language that is not installed, a timeout the executor will not take
        return reply("refused", str(exc))
    except Exception as exc:  # the contract: one object whatever happens
        return reply("error", f"internal error: {type(exc).__name__}: {exc}")
    return completed(result)
