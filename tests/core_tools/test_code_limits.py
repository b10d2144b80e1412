"""The code tool's run bound holds with the compose deploy's executor too: the sandbox as its own service."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from core_tools.code.slots import CodeLimits
from core_tools.code.tool import CodeTool
from core_tools.sandbox import Isolation, detect_isolation
from core_tools.sandbox.client import ServiceExecutor
from core_tools.types import ToolContext
from db.executions import Executions

REPO = Path(__file__).resolve().parents[2]
ISOLATION, REASON = detect_isolation()
TIMED = "import time\nstart = time.time()\ntime.sleep(0.4)\nprint(start, time.time())"


@pytest.fixture
def service_socket(tmp_path: Path) -> Iterator[Path]:
    """A real `python -m core_tools.sandbox.service` (it allows 8 runs at once) on a unix socket."""
    if ISOLATION is not Isolation.BWRAP:
        pytest.skip(f"no working bwrap: {REASON}")
    sock = tmp_path / "sandbox.sock"
    proc = subprocess.Popen(
        [sys.executable, "-m", "core_tools.sandbox.service", "--socket", str(sock), "--max-concurrent", "8"],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 20
        while not sock.exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the sandbox service did not come up"
            time.sleep(0.05)
        yield sock
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@pytest.mark.slow  # a sandbox service process
async def test_the_bound_holds_over_the_sandbox_service(
    service_socket: Path, db_sessions: sessionmaker[Session]
) -> None:
    tool = CodeTool(
        ServiceExecutor(str(service_socket), timeout_margin_s=10.0),
        Executions(db_sessions),
        limits=CodeLimits(max_runs=2, max_runs_per_user=2, queue_wait_s=60),
    )
    ctx = ToolContext(user_id=7, chat_id=7, session_id="s1")
    out = await asyncio.gather(*[tool.code(ctx, "execute", code=f"# {i}\n{TIMED}") for i in range(8)])
    assert all(o["success"] for o in out), out
    spans = sorted(tuple(float(x) for x in o["stdout"].split()) for o in out)
    # Read from inside the sandbox: no instant had more than two runs, though the service allows eight.
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert most <= 2 and tool.runs.peak == 2
