"""The replica cluster fixture: N `python -m bot` processes on one fresh PostgreSQL database."""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator
from pathlib import Path

import pytest

from tests.replicas.harness import USERS, Cluster
from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.telegram_api import FakeTelegram


@pytest.fixture
async def cluster(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, database_url: str, request: pytest.FixtureRequest
) -> AsyncIterator[Cluster]:
    """A cluster with no replica started yet (the test says how many); every replica killed at the end,
    and the replicas' logs shown when the test failed."""
    c = Cluster(tmp_path, tg, llm, database_url, USERS)
    try:
        yield c
    finally:
        await c.close()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print(c.logs())


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Remember each phase's report on the test item (the fixture above prints logs on failure)."""
    report: pytest.TestReport = yield
    setattr(item, f"rep_{report.when}", report)
    return report
