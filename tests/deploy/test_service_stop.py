"""A stopped turn closes its connection to the sandbox service: the service kills that run's processes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from core_tools.sandbox import Isolation
from core_tools.sandbox.client import ServiceExecutor
from tests.bot.test_stop import processes_with
from tests.deploy.test_service import ISOLATION, REASON, Service, hello

pytestmark = [
    pytest.mark.slow,  # sandbox service processes
    pytest.mark.skipif(ISOLATION is not Isolation.BWRAP, reason=f"no working bwrap: {REASON}"),
]


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    started = Service(tmp_path / "run" / "sandbox.sock", "--timeout", "60", "--max-timeout", "60").start()
    yield started
    started.stop()


async def test_a_cancelled_run_is_killed_by_the_service(service: Service) -> None:
    marker = "319.25"
    executor = ServiceExecutor(str(service.sock))
    code = f"import subprocess\nsubprocess.run(['sleep', '{marker}'])\n"
    run = asyncio.create_task(executor.run(code, "python", 60))
    while not processes_with(marker):
        await asyncio.sleep(0.05)
    run.cancel()  # what /stop does to the turn's tool call: the client closes its connection
    with pytest.raises(asyncio.CancelledError):
        await run
    for _ in range(100):  # the service notices the closed connection and kills the run
        if not processes_with(marker) and hello(service.sock)["running"] == 0:
            break
        await asyncio.sleep(0.05)
    assert processes_with(marker) == []
    assert hello(service.sock)["running"] == 0
