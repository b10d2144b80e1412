"""The reading worker: one file's text, in a process of its own held to memory and CPU limits.

`python -m core_tools.media.worker '<json>'` reads the file at `path` and prints one JSON object:
{"kind", "text", "outline"} or {"error"} (a MediaError's message). A file that needs more memory than
`memory_bytes` ends it with MEMORY_EXIT; one that needs more CPU than `cpu_s` is killed by SIGXCPU. The bot
(core_tools.media.reader) also kills it at its wall-clock limit. It writes nothing but its answer.
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path
from typing import Any

from core_tools.errors import MediaError
from core_tools.media.extract import extract

MEMORY_EXIT = 75  # the exit code of a file whose reading ran out of the memory limit


def _limit(memory_bytes: int, cpu_s: int) -> None:
    # The parser a file needs (pypdf, python-docx and lxml: about 60 MB) loads under the limit too.
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))


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
    """Read the file the JSON argument names; print the answer; the exit code tells a memory failure."""
    params = json.loads(argv[1])
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
