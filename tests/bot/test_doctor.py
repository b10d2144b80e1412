"""`python -m bot doctor` against the loopback fakes: every line probes what it names, every failure says
what to do, and an empty allowlist (the README's first step) is a warning, not a failure."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.search import FakeServer, hang
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.processes import full_env, run_bot

pytestmark = pytest.mark.slow  # real `python -m bot doctor` processes


@pytest.fixture
async def silent_searxng() -> AsyncIterator[str]:
    """A SearXNG that accepts every search and never answers."""
    server = FakeServer()
    await server.start()
    server.on("GET", "/search", hang(server))
    yield server.base_url
    await server.close()


def failures(out: str) -> list[str]:
    """The FAIL lines of a doctor report."""
    return [line for line in out.splitlines() if line.startswith("FAIL")]


async def test_search_that_does_not_answer_fails_with_a_fix(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, silent_searxng: str
) -> None:
    env = full_env(tmp_path, tg, llm, SEARCH_PROVIDER="searxng", SEARXNG_URL=silent_searxng)
    code, out, err = await run_bot(tmp_path, "doctor", "--timeout", "3", env=env, timeout=120)
    assert code == 1, out + err
    (search,) = [line for line in out.splitlines() if " search: " in line]
    assert search.startswith("FAIL search: searxng no answer within 3 s. Fix: check SEARXNG_URL")
    assert silent_searxng in search and "Traceback" not in out + err


async def test_every_failure_says_what_to_do(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, silent_searxng: str
) -> None:
    tg.fail_next("getMe", error="unauthorized")
    env = full_env(
        tmp_path,
        tg,
        llm,
        OPENAI_BASE_URL="http://127.0.0.1:9/v1",
        OPENAI_API_KEY="sk-test",
        SEARCH_PROVIDER="searxng",
        SEARXNG_URL=silent_searxng,
        CODE_PYTHON_ENV="/opt/no-such-toolkit-here",
        EMBEDDINGS_BASE_URL="http://127.0.0.1:9/v1",
    )
    code, out, err = await run_bot(tmp_path, "doctor", "--timeout", "3", env=env, timeout=120)
    assert code == 1, out + err
    failed = failures(out)
    names = {line.split(":")[0].removeprefix("FAIL ") for line in failed}
    assert names >= {"telegram", "llm", "search", "embedder"}, out
    for line in failed:
        assert ". Fix: " in line and line.split(". Fix: ")[1].strip(), line
    (toolkit,) = [line for line in out.splitlines() if " toolkit: " in line]
    assert toolkit.startswith("WARN toolkit: numpy, pandas and matplotlib not installed at /opt/no-such")
    assert "Fix: start the bot, which installs them there in the background, or install them now" in toolkit
    assert "sk-test" not in out + err


async def test_an_empty_allowlist_is_a_warning_and_exit_0(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, searxng: str
) -> None:
    env = full_env(
        tmp_path,
        tg,
        llm,
        ALLOWED_USER_IDS="",
        SEARCH_PROVIDER="searxng",
        SEARXNG_URL=searxng,
        APPROVE_TOOLS="reads:internet",
    )
    code, out, err = await run_bot(tmp_path, "doctor", "--timeout", "60", env=env, timeout=180)
    assert code == 0, out + err
    assert failures(out) == []
    # The tools, each with what it reads and writes, and which ask for approval (issue 25).
    (tools,) = [line for line in out.splitlines() if " tools: " in line]
    assert tools.startswith("ok   tools: ") and "fetch (reads internet; asks approval)" in tools
    assert "memory (reads memory; writes memory)" in tools
    (telegram,) = [line for line in out.splitlines() if " telegram: " in line]
    assert telegram.startswith("WARN telegram: @test_bot, no allowed users")
    assert "Fix: message the bot, put the id it tells you in ALLOWED_USER_IDS" in telegram
