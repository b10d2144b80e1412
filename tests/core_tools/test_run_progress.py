"""A run's output reaches the progress status while the run goes on, one bounded, printable line."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from core_tools.code.output import output_line, progress_status
from core_tools.sandbox import Isolation, LocalExecutor, SandboxLimits, detect_isolation
from core_tools.sandbox.client import ServiceExecutor
from tests.deploy.test_service import Service

ISOLATION, REASON = detect_isolation()


@pytest.fixture
def executor() -> LocalExecutor:
    if ISOLATION is not Isolation.BWRAP:
        pytest.skip(f"no working bwrap: {REASON}")
    return LocalExecutor(SandboxLimits(timeout_s=60.0, max_timeout_s=60.0))


# The program never ends by itself: only a line seen mid-run can stop it before its 60 s timeout.
ENDLESS = """import sys, time
print("loading")
sys.stderr.write("progress 10%\\rprogress 50%\\r")
sys.stderr.flush()
print("ready", flush=True)
sys.stdout.write("half a line")
sys.stdout.flush()
while True:
    time.sleep(0.1)
"""


async def test_the_latest_complete_line_arrives_while_the_program_still_runs(executor: LocalExecutor) -> None:
    seen: list[str] = []
    ready = asyncio.Event()

    def watch(line: str) -> None:
        seen.append(line)
        if line == "ready":
            ready.set()

    run = asyncio.create_task(executor.run(ENDLESS, on_output=watch))
    await asyncio.wait_for(ready.wait(), 30)
    assert not run.done()
    run.cancel()
    await asyncio.wait({run})
    assert "progress 50%" in seen  # a progress bar redraws its line with \r: the latest state counts
    assert "half a line" not in seen  # an unfinished line is not shown


@pytest.mark.slow  # a sandbox service process
async def test_the_sandbox_service_sends_the_latest_line_while_the_program_runs(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    sock = tmp_path / "run" / "sandbox.sock"
    service = Service(sock, "--timeout", "60").start()
    try:
        seen: list[str] = []
        ready = asyncio.Event()

        def watch(line: str) -> None:  # the service sends the latest line once a second: any may come
            seen.append(line)
            ready.set()

        run = asyncio.create_task(ServiceExecutor(str(sock)).run(ENDLESS, on_output=watch))
        await asyncio.wait_for(ready.wait(), 30)
        assert not run.done()
        run.cancel()  # the connection closes: the service kills the run
        await asyncio.wait({run})
        assert seen and set(seen) <= {"loading", "progress 50%", "ready"}
        done = await ServiceExecutor(str(sock)).run("print('after')")  # the service goes on serving
        assert done.success and done.stdout == "after\n"
    finally:
        service.stop()


async def test_a_flood_of_output_reports_only_bounded_lines(executor: LocalExecutor) -> None:
    seen: list[str] = []
    result = await executor.run("print('x' * 200_000)\nprint('end')", on_output=seen.append)
    assert result.success
    assert seen[-1] == "end"
    assert all(len(line) <= 8192 for line in seen)


def test_a_line_of_output_is_made_safe_for_the_status() -> None:
    assert output_line("\x1b[31mred\x1b[0m alert") == "red alert"
    assert output_line("evil\u202eexe.txt\u200b\tend") == "evil exe.txt end"
    long = output_line("a" * 500)
    assert len(long) == 80 and long.endswith("\u2026")


def test_the_status_says_what_runs_for_how_long_and_what_it_printed() -> None:
    assert progress_status("running code...", 4.6, None) == "running code... 4 s"
    assert progress_status("running code...", 13.2, None) == "running code... 10 s"
    long_run = progress_status("running code...", 137, "step 2")
    assert long_run == "running code... 2 min 15 s, last output: step 2"
    assert progress_status("running code...", 7, " \x07 ") == "running code... 7 s"
