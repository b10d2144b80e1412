"""The reading worker: one file's text, in a process of its own held to memory and CPU limits.

`python -m core_tools.media.worker '<json>'` reads the file at `path` and prints one JSON object:
{"kind", "text", "outline"} or {"error"} (a MediaError's message). A file that needs more memory than
`memory_bytes` ends it with MEMORY_EXIT; one that needs more CPU than `cpu_s` is killed by SIGXCPU. The bot
(core_tools.media.reader) also kills it at its wall-clock limit. It writes nothing but its answer.

Without the argument it is a worker started ahead: it loads the parsers first (pypdf alone takes about a
third of a second), then waits for the same JSON as one line on stdin; the limits apply from then on. At
the end of stdin (the bot went away) it exits without reading anything.
"""

from __future__ import annotations

import contextlib
import json
import math
import resource
import sys
from pathlib import Path
from typing import Any

from core_tools.errors import MediaError
from core_tools.media.extract import extract

MEMORY_EXIT = 75  # the exit code of a file whose reading ran out of the memory limit
MAX_PARAMS = 64 * 1024  # the JSON line a worker started ahead takes (a path, a name, numbers)


def _limit(memory_bytes: int, cpu_s: int) -> None:
    # The parsers (pypdf, python-docx and lxml: about 60 MB) count against the memory limit too. The CPU
    # limit counts from the process's start: what loading them took ahead is added, not taken from the file.
    used = resource.getrusage(resource.RUSAGE_SELF)
    cpu = cpu_s + math.ceil(used.ru_utime + used.ru_stime)
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))


def _load_parsers() -> None:
    """Import what reading a PDF or a DOCX needs, before any file is there (a worker started ahead)."""
    with contextlib.suppress(ImportError):
        import docx  # noqa: F401
        import pypdf  # noqa: F401
        from lxml import etree  # noqa: F401


def _read(params: dict[str, Any]) -> dict[str, str]:
    data = Path(params["path"]).read_bytes()
    try:
        got = extract(
            params["name"],
            params["mime"],
            data,
            max_chars=params["max_chars"],
            max_unpacked=params["max_unpacked"],
        )
    except MediaError as exc:
        return {"error": str(exc)}
    return {"kind": got.kind, "text": got.text, "outline": got.outline}


def main(argv: list[str]) -> int:
    """Read the file the JSON argument (or stdin's first line) names; print the answer; the exit code tells
    a memory failure."""
    if len(argv) > 1:
        params = json.loads(argv[1])
    else:
        _load_parsers()
        line = sys.stdin.buffer.readline(MAX_PARAMS)
        if not line.strip():
            return 0  # nobody needs it any more
        params = json.loads(line)
    _limit(int(params["memory_bytes"]), int(params["cpu_s"]))
    try:
        answer = json.dumps(_read(params), ensure_ascii=False)
    except MemoryError:
        return MEMORY_EXIT
    sys.stdout.write(answer)
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
