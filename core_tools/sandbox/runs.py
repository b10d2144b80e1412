"""One run on the sandbox service's side: the checks of its request's limits, a refusal's kind, its progress
lines while it runs, its end when the client leaves, and its answer (server.py serves the connections)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Coroutine
from typing import Any

from core_tools.sandbox.model import ExecutionResult, FileLimits
from core_tools.sandbox.protocol import MAX_OUTPUT_LINE_CHARS, encode

Reply = tuple[dict[str, Any], list[bytes]]  # an answer line and the bytes of the files it declares

PROGRESS_EVERY_S = 1.0  # at most one progress line a second
USERNS_HINT = (
    "in a container the sandbox needs the seccomp profile deploy/seccomp-bwrap.json (Docker's default one "
    "forbids the namespace, mount and sethostname calls bwrap makes), systempaths=unconfined and "
    "apparmor=unconfined, as deploy/docker-compose.yml sets them; and the host must allow unprivileged user "
    "namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 23.10+ also "
    "kernel.apparmor_restrict_unprivileged_userns=0): see deploy/README.md"
)


class Refusal(Exception):
    """A request answered with a failure line."""

    def __init__(self, kind: str, error: str) -> None:
        super().__init__(error)
        self.kind = kind
        self.error = error


def files_out_limits(raw: object) -> FileLimits | None:
    """The run request's limits for files out, checked."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise Refusal("bad_request", "files_out must be an object with max_files and max_bytes")
    count, size = raw.get("max_files"), raw.get("max_bytes")
    if not isinstance(count, int) or not isinstance(size, int) or count < 0 or size < 0:
        raise Refusal("bad_request", "files_out needs max_files and max_bytes as numbers of at least 0")
    return FileLimits(count, size)


def result_reply(result: ExecutionResult) -> Reply:
    """A run's answer line and, after it, the bytes of its files out."""
    if result.error_category == "refused":
        result = dataclasses.replace(result, stderr=f"{result.stderr}\nSandbox service: {USERNS_HINT}.")
    answer = dataclasses.asdict(result)
    answer["files_out"] = [{"name": f.name, "size": len(f.data)} for f in result.files_out]
    return {"ok": True, "result": answer}, [f.data for f in result.files_out]


class Progress:
    """The latest line of a run's output, sent to the client as progress lines (`"progress": true`)."""

    def __init__(self) -> None:
        self.line: str | None = None

    def see(self, line: str) -> None:
        """The executor's report of a new latest line."""
        self.line = line

    async def report(self, writer: asyncio.StreamWriter) -> None:
        """Send the latest line once a second while it changes, until cancelled."""
        sent: str | None = None
        while True:
            await asyncio.sleep(PROGRESS_EVERY_S)
            line = self.line
            if line is not None and line != sent:
                writer.write(encode({"output": line[:MAX_OUTPUT_LINE_CHARS]}))
                await writer.drain()
                sent = line


class ClientGone(Exception):
    """The client closed its connection while its run was going."""


async def unless_client_leaves(
    run: Coroutine[Any, Any, ExecutionResult], reader: asyncio.StreamReader
) -> ExecutionResult:
    """Await a run, cancelling it (LocalExecutor then kills its process tree) when the client's connection
    closes first: a stopped turn must not leave its code running here."""
    task = asyncio.ensure_future(run)
    gone = asyncio.ensure_future(reader.read(1))  # the client sends nothing more: b"" means it left
    try:
        await asyncio.wait({task, gone}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            if gone.exception() is None and gone.result() != b"":
                return await task  # the client sent more bytes: odd, but it is still there
            task.cancel()
            await asyncio.wait({task})
            raise ClientGone
        return task.result()
    finally:
        gone.cancel()
        if not task.done():  # this handler itself was cancelled (shutdown)
            task.cancel()
            await asyncio.wait({task})
