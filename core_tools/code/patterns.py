"""Error patterns of failed code runs: the failing line and the error, and the short "lessons" note.

Pure functions over what the execution log keeps: /codestats shows an example per category, the code tool's
`failures` action lists a session's failed runs, and the lessons note tells the model what keeps failing for
this user in this sandbox. The note is built from error categories and the sandbox's own messages (a missing
module's name), never from a program's text.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from db.executions import FailedRun

EXAMPLE_CHARS = 100  # the most of a failing line or an error line an example shows
LESSONS_CHARS = 600  # about 150 tokens
FAILURE_CODE_CHARS = 1500  # of each failed run's program, for the model
FAILURE_STDERR_CHARS = 400
TOOLKIT_MODULES = frozenset({"numpy", "pandas", "matplotlib"})

# Where the program's own line is named: Python's `File "<stdin>", line N` (the program is read on stdin),
# Node's `[stdin]:N` / `[eval1]:N` (a script or a module read on stdin).
_PY_FRAME = re.compile(r'File "<(?:stdin|string)>", line (\d+)')
_NODE_FRAME = re.compile(r"^\[(?:stdin|eval\d*)\]:(\d+)", re.M)
_NODE_ERROR = re.compile(r"^(?:Uncaught )?[A-Z][\w$]*(?: \[\w+\])?: .*$", re.M)
_MISSING_MODULE = re.compile(r"No module named '([\w.]+)'|Cannot find (?:module|package) '([^'\s]+)'", re.M)
_NO_FILE = re.compile(r"(?:FileNotFoundError|ENOENT)\b")


@dataclass(frozen=True)
class Failure:
    """What a failed run said: its category, language and the end of its stderr."""

    category: str | None
    language: str
    stderr: str


def failing_line_number(stderr: str, language: str) -> int | None:
    """The number of the program's line the error points at (its deepest frame), if the error names it."""
    if language == "javascript":
        found = _NODE_FRAME.findall(stderr)
        return int(found[0]) if found else None
    found = _PY_FRAME.findall(stderr)
    return int(found[-1]) if found else None


def _clip(text: str, limit: int = EXAMPLE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def failing_line(code: str, stderr: str, language: str) -> str | None:
    """`line N: <the line>` of the program where the error happened, or None when the error names none."""
    number = failing_line_number(stderr, language)
    lines = code.splitlines()
    if number is None or not 1 <= number <= len(lines):
        return None
    return f"line {number}: {_clip(lines[number - 1].strip())}"


def error_line(stderr: str, language: str, category: str | None) -> str:
    """The one line that says what went wrong: the exception of a traceback, Node's error line."""
    if language == "javascript":
        m = _NODE_ERROR.search(stderr)
        if m is not None:
            return _clip(m.group(0))
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    lines = [line for line in lines if not line.startswith("Node.js v")]
    if lines:
        return _clip(lines[-1])
    return {"timeout": "the run hit its time limit", "memory": "the run ran out of memory"}.get(
        category or "", "no error output"
    )


def example(code: str, stderr: str, language: str, category: str | None) -> str:
    """One short example of a failure: the failing line (when known) and the error."""
    where = failing_line(code, stderr, language)
    error = error_line(stderr, language, category)
    return f"{where} \u2192 {error}" if where else error


def missing_modules(stderr: str) -> list[str]:
    """Top-level names of the modules an import failed to find."""
    found = []
    for py, node in _MISSING_MODULE.findall(stderr):
        name = py.split(".")[0] if py else node
        if name and name not in found:
            found.append(name)
    return found


def lessons(
    failures: Sequence[Failure], *, network: bool, toolkit: bool, max_chars: int = LESSONS_CHARS
) -> str:
    """A short note of what keeps failing in the user's recent runs and what to do instead ("" for none).

    `network` and `toolkit` are the sandbox's state now: a lesson the sandbox has since made wrong (numpy
    missing once the toolkit is installed) is left out."""
    if not failures:
        return ""
    counts = Counter(f.category or "unknown" for f in failures)
    items: list[str] = []
    modules: Counter[str] = Counter()
    for f in failures:
        if f.category == "import":
            modules.update(missing_modules(f.stderr))
    if toolkit:
        for name in TOOLKIT_MODULES:
            modules.pop(name, None)
    if modules:
        names = ", ".join(name for name, _ in modules.most_common(4))
        items.append(
            f"{names} {'is' if len(modules) == 1 else 'are'} not installed in this sandbox: do not import"
        )
    if counts["network"] and not network:
        items.append("the network is off in this sandbox: do not fetch from code (use the fetch tool)")
    elif counts["network"]:
        items.append(f"{counts['network']} runs failed on the network: handle connection errors")
    if counts["timeout"]:
        items.append(
            f"{counts['timeout']} runs hit the time limit: do less per run or pass a larger timeout_ms"
        )
    if counts["memory"]:
        items.append(f"{counts['memory']} runs ran out of memory: process data in chunks")
    if any(f.category == "runtime" and _NO_FILE.search(f.stderr) for f in failures):
        items.append("files were missing: the user's files are only under in/ (list it first)")
    if counts["syntax"]:
        items.append(f"{counts['syntax']} runs had syntax errors: send whole programs in the chosen language")
    if not items:
        return ""
    note = "Lessons from this user's recent failed runs: "
    kept: list[str] = []
    for item in items:
        if len(note) + len("; ".join([*kept, item])) + 1 > max_chars:
            break
        kept.append(item)
    return note + "; ".join(kept) + "." if kept else ""


def failures_for_model(runs: Sequence[FailedRun]) -> dict[str, Any]:
    """The code tool's `failures` answer: each failed run's code, error, failing line and category."""
    failures = []
    for f in runs:
        code = (
            f.code if len(f.code) <= FAILURE_CODE_CHARS else f.code[:FAILURE_CODE_CHARS] + "\n[... cut ...]"
        )
        item: dict[str, Any] = {
            "execution_id": f.id,
            "language": f.language,
            "error_category": f.error_category or "unknown",
            "error": error_line(f.stderr, f.language, f.error_category),
            "code": code,
        }
        where = failing_line(f.code, f.stderr, f.language)
        if where:
            item["failing_line"] = where
        if f.stderr.strip():
            item["stderr_end"] = f.stderr.strip()[-FAILURE_STDERR_CHARS:]
        failures.append(item)
    if not failures:
        return {"failures": [], "note": "no failed code runs in this session"}
    return {"failures": failures, "count": len(failures)}
