"""A measuring cgroup: the most memory a run of the real executor ever held on the host, as the kernel saw it.

A helper process runs the executor inside a fresh cgroup of our own with no limit, so the kernel records the
peak of the helper and everything it started: what the host gave the run, whether the run's bound was its
own cgroup or the watchdog. Needs a writable cgroup v1 memory hierarchy. Used by
tests/core_tools/test_sandbox_memory.py and bench/bench_sandbox.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

# Six children touching 200 MB each: 1.2 GB if nothing bounds the run as a whole.
FORKS = """
import os, time
pids = []
for _ in range(6):
    pid = os.fork()
    if pid == 0:
        block = bytearray(200 * 1024 * 1024)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(5)
        os._exit(0)
    pids.append(pid)
print([os.waitpid(pid, 0)[1] for pid in pids])
"""

HELPER = """
import asyncio, dataclasses, json, os, sys
from pathlib import Path
from core_tools.sandbox import LocalExecutor, SandboxLimits

args = json.loads(sys.argv[1])
measure = Path(args["measure"])

async def main():
    executor = LocalExecutor(SandboxLimits(**args["limits"]), cgroups=args["cgroups"], ahead=args["ahead"])
    assert (await executor.run("print(1)")).success  # imports and first-run costs before measuring
    if args["ahead"]:  # the measured run takes a sandbox that was started before it
        assert await executor.prepare()
    base = int((measure / "memory.usage_in_bytes").read_text())
    if os.access(measure / "memory.max_usage_in_bytes", os.W_OK):  # root: the peak restarts from now
        (measure / "memory.max_usage_in_bytes").write_text("0")
    result = await executor.run(args["code"])
    peak = int((measure / "memory.max_usage_in_bytes").read_text())
    await executor.aclose()  # sandboxes started ahead go, and every run cgroup is removed
    print(json.dumps({"held": peak - base, "bound": executor.memory_bound,
                      "limit_mb": executor.limits.memory_mb, "result": dataclasses.asdict(result)}))

asyncio.run(main())
"""


def own_memory_cgroup() -> Path | None:
    """Our cgroup in a writable v1 memory hierarchy, not its root."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _id, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            own = Path("/sys/fs/cgroup/memory") / path.lstrip("/")
            if path != "/" and os.access(own, os.W_OK) and (own / "memory.max_usage_in_bytes").exists():
                return own
    return None


def measured_run(
    code: str,
    *,
    cgroups: bool,
    limits: dict[str, Any] | None = None,
    as_nobody: bool = False,
    prefix: str = "measure",
    ahead: int = 0,
) -> dict[str, Any]:
    """Run `code` once through a helper in a fresh measuring cgroup; the helper's report.

    `cgroups=False` makes the executor bound the run with its watchdog; `limits` are SandboxLimits fields
    (defaults otherwise); `ahead=1` runs the code in a sandbox started before it. The report: `held`
    (bytes), `bound`, `limit_mb`, `result` (the ExecutionResult as a dict) and `leftover_cgroups` (run
    cgroups the executor left behind once closed: should be none).
    """
    own = own_memory_cgroup()
    assert own is not None, "no writable cgroup v1 memory hierarchy to measure with"
    measure = own / f"{prefix}-{uuid.uuid4().hex[:8]}"
    measure.mkdir()
    try:
        args = {
            "measure": str(measure),
            "limits": limits or {},
            "cgroups": cgroups,
            "code": code,
            "ahead": ahead,
        }
        join = f'echo $$ > {measure / "cgroup.procs"} && exec "$@"'
        python = [sys.executable]
        if as_nobody:  # a user who may not create cgroups; the system python, the venv is root's
            python = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3"]
        done = subprocess.run(
            ["/bin/sh", "-c", join, "sh", *python, "-c", HELPER, json.dumps(args)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            check=False,
        )
        assert done.returncode == 0, done.stderr
        report: dict[str, Any] = json.loads(done.stdout)
        report["leftover_cgroups"] = [p.name for p in measure.iterdir() if p.is_dir()]
        return report
    finally:
        remove_cgroup(measure)


def remove_cgroup(cgroup: Path) -> None:
    """Kill whatever a failed helper left and remove the measuring cgroup (killed tasks take a moment)."""
    for child in [p for p in cgroup.iterdir() if p.is_dir()]:  # run cgroups a failed helper left
        remove_cgroup(child)
    for _ in range(500):
        for pid in (cgroup / "cgroup.procs").read_text().split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
        try:
            cgroup.rmdir()
            return
        except OSError:
            time.sleep(0.01)
    cgroup.rmdir()
