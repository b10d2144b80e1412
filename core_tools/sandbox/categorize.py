"""Turns the real output of a failed run into one short error category the model can act on."""

from __future__ import annotations

import re
import signal

CATEGORIES = (
    "syntax",
    "import",
    "type",
    "reference",
    "timeout",
    "network",
    "memory",
    "runtime",
    "refused",
    "unknown",
)

# Python's last traceback line: `Name: message` or a bare `Name` (dotted names such as socket.gaierror too).
_PY_EXC_LINE = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)(?::\s?(?P<msg>.*))?$")
# Node prints the uncaught error as `Name: message` or `Name [ERR_CODE]: message` at column 0.
_NODE_EXC_LINE = re.compile(r"^(?P<name>[A-Z][\w$]*)(?: \[(?P<code>\w+)\])?: (?P<msg>.*)$", re.M)

_PY_BY_NAME = {
    "SyntaxError": "syntax",
    "IndentationError": "syntax",
    "TabError": "syntax",
    "ModuleNotFoundError": "import",
    "ImportError": "import",
    "TypeError": "type",
    "NameError": "reference",
    "UnboundLocalError": "reference",
    "MemoryError": "memory",
    "ConnectionError": "network",
    "ConnectionRefusedError": "network",
    "ConnectionResetError": "network",
    "ConnectionAbortedError": "network",
    "gaierror": "network",
    "herror": "network",
    "URLError": "network",
    "HTTPError": "network",
    "RemoteDisconnected": "network",
    "SSLError": "network",
    "SSLCertVerificationError": "network",
}
_NETWORK_TEXT = re.compile(
    r"Network is unreachable|Connection refused|Name or service not known"
    r"|Temporary failure in name resolution|No address associated with hostname"
    r"|ECONNREFUSED|ENOTFOUND|EAI_AGAIN|ENETUNREACH|EHOSTUNREACH"
    r"|ECONNRESET|fetch failed|getaddrinfo|urlopen error",
)
_MEMORY_TEXT = re.compile(
    r"heap out of memory|Reached heap limit|process out of memory|std::bad_alloc|Cannot allocate memory"
    r"|MemoryError|out of memory|Array buffer allocation failed",
    re.I,
)
_NODE_IMPORT_TEXT = re.compile(
    r"ERR_MODULE_NOT_FOUND|MODULE_NOT_FOUND|Cannot find module|Cannot find package"
)
_NODE_BY_NAME = {"SyntaxError": "syntax", "ReferenceError": "reference", "TypeError": "type"}
_TIME_SIGNALS = {int(signal.SIGXCPU)}
_CRASH_SIGNALS = {int(signal.SIGKILL), int(signal.SIGSEGV), int(signal.SIGABRT), int(signal.SIGBUS)}


def _signal_of(exit_code: int | None) -> int | None:
    """The signal that ended the process: negative codes come from us, 128+N from bwrap or a shell."""
    if exit_code is None:
        return None
    if exit_code < 0:
        return -exit_code
    if 128 < exit_code < 128 + 65:
        return exit_code - 128
    return None


def _python_category(stderr: str) -> str | None:
    """Category from the final exception line of a Python traceback, if there is one."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    if not lines or not any(line.startswith("Traceback") or "Error" in line for line in lines):
        return None
    # The final line of a traceback is the exception that ended the program (after any chained ones).
    match = _PY_EXC_LINE.match(lines[-1])
    if match is None:
        return None
    name = match.group("name").rsplit(".", 1)[-1]
    message = match.group("msg") or ""
    if name in _PY_BY_NAME:
        return _PY_BY_NAME[name]
    if _NETWORK_TEXT.search(message) or (name in {"timeout", "TimeoutError"} and message == "timed out"):
        return "network"  # socket timeouts print as `TimeoutError: timed out`
    if name.endswith(("Error", "Exception", "Exit", "Interrupt")) or name[:1].isupper():
        return "runtime"
    return None


def _node_category(stderr: str) -> str | None:
    """Category from Node's uncaught error report (its name, code or a known message)."""
    if _MEMORY_TEXT.search(stderr) and (
        "heap" in stderr or "FATAL ERROR" in stderr or "allocation" in stderr
    ):
        return "memory"
    match = _NODE_EXC_LINE.search(stderr)
    if _NODE_IMPORT_TEXT.search(stderr) and (match is None or match.group("name") == "Error"):
        return "import"
    if _NETWORK_TEXT.search(stderr):
        return "network"
    if match is None:
        return None
    return _NODE_BY_NAME.get(match.group("name"), "runtime")


def categorize_error(
    language: str,
    stderr: str,
    exit_code: int | None,
    timed_out: bool,
    *,
    refused: bool = False,
) -> str | None:
    """One of CATEGORIES for a failed run, or None when the run succeeded."""
    if refused:
        return "refused"
    if timed_out:
        return "timeout"
    if exit_code == 0:
        return None
    sig = _signal_of(exit_code)
    if sig in _TIME_SIGNALS:
        return "timeout"  # RLIMIT_CPU ran out
    found = _node_category(stderr) if language == "javascript" else _python_category(stderr)
    if found is not None:
        return found
    if _MEMORY_TEXT.search(stderr):
        return "memory"
    if sig in _CRASH_SIGNALS:
        return "unknown"
    return "runtime" if exit_code is not None and sig is None else "unknown"
