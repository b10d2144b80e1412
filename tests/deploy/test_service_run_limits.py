"""A bot whose code runs in sandbox services follows the services' limits, not its own CODE_* settings, and
says which of its settings they overrule: real service processes, the real bot against the fakes."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.process.ops import check_sandbox
from core_tools.sandbox import Isolation, detect_isolation
from tests.deploy.test_service import Service
from tests.support.fakes.openai_api import FakeLLM, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, running_bot

ISOLATION, REASON = detect_isolation()
pytestmark = [
    pytest.mark.skipif(ISOLATION is not Isolation.BWRAP, reason=f"no working bwrap: {REASON}"),
    pytest.mark.slow,  # a sandbox service process
]

# The bot's own settings: what a run would get if the bot ran the code itself.
OWN = {"code_timeout_s": 30, "code_max_timeout_s": 120, "code_memory_mb": 512, "code_network": True}


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Start `python -m core_tools.sandbox.service` on a socket of its own; its path."""
    started: list[Service] = []

    def _start(*args: str, name: str = "sandbox") -> Path:
        sock = tmp_path / "run" / f"{name}.sock"
        started.append(Service(sock, *args).start())
        return sock

    yield _start
    for one in started:
        one.stop()


def code_description(llm: FakeLLM, request: int = -1) -> str:
    """The code tool's description in one of the requests the model got."""
    (tool,) = [t for t in llm.requests[request]["tools"] if t["function"]["name"] == "code"]
    description: str = tool["function"]["description"]
    return description


def tool_result(llm: FakeLLM) -> dict[str, Any]:
    """What the model was told about its last tool call."""
    result: dict[str, Any] = json.loads(llm.requests[-1]["messages"][-1]["content"])
    return result


def overruled(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The lines the bot logged about settings a sandbox service overrules."""
    return [r.getMessage() for r in caplog.records if "is ignored: the sandbox service at" in r.getMessage()]


async def test_the_bot_follows_the_services_limits_and_says_so(
    tmp_path: Path,
    tg: FakeTelegram,
    llm: FakeLLM,
    service: Callable[..., Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """CODE_TIMEOUT_S, CODE_MAX_TIMEOUT_S, CODE_MEMORY_MB and CODE_NETWORK were silently ignored with a
    service: the model was told the bot's limits while the service applied its own."""
    sock = service("--timeout", "2", "--max-timeout", "3", "--memory-mb", "200")
    caplog.set_level(logging.WARNING)
    llm.script(
        tool_calls(call("code", {"action": "execute", "code": "import time; time.sleep(20); print('late')"})),
        text("Stopped."),
        tool_calls(
            call("code", {"action": "execute", "code": "x = bytearray(300 * 1024 * 1024); print('ok')"})
        ),
        text("Too big."),
    )
    async with running_bot(tmp_path, tg, llm, code_sandbox_socket=str(sock), **OWN) as h:
        # Said at start, one line per setting the service overrules.
        assert overruled(caplog) == [
            f"CODE_TIMEOUT_S=30 is ignored: the sandbox service at {sock} gives a run 2 s unless it asks "
            "for less or more",
            f"CODE_MAX_TIMEOUT_S=120 is ignored: the sandbox service at {sock} lets a run ask for at most "
            "3 s",
            f"CODE_MEMORY_MB=512 is ignored: the sandbox service at {sock} bounds a run at 200 MB",
            f"CODE_NETWORK=true is ignored: the sandbox service at {sock} runs code without network",
        ]
        tg.push_text(OWNER, "wait twenty seconds")
        await h.final_text(OWNER, "Stopped.")
        # The model is told what a run really gets, and the run got it: 2 s, not the bot's 30.
        assert (
            "Each run: 2 s of wall clock unless timeout_ms says otherwise (at most 3 s), 200 MB of memory "
            "for all its processes, without network." in code_description(llm, 0)
        )
        result = tool_result(llm)
        assert result["error_category"] == "timeout" and "timeout of 2 s exceeded" in result["stderr"], result
        tg.push_text(OWNER, "take 300 MB")
        await h.final_text(OWNER, "Too big.")
        result = tool_result(llm)
        # 300 MB fit the bot's 512, not the service's 200 (each process is capped at it too).
        assert result["error_category"] == "memory" and "MemoryError" in result["stderr"], result
        # `doctor` shows the same.
        check = await check_sandbox(h.services)
        assert check.ok and check.warning, check
        assert all(line in check.detail for line in overruled(caplog)), check.detail


async def test_a_pool_follows_the_smallest_limits(
    tmp_path: Path,
    tg: FakeTelegram,
    llm: FakeLLM,
    service: Callable[..., Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A run may go to any service of the pool: the model is told what each of them allows."""
    one = service("--timeout", "5", "--max-timeout", "30", "--memory-mb", "300", name="one")
    two = service("--timeout", "8", "--max-timeout", "20", "--memory-mb", "400", name="two")
    caplog.set_level(logging.WARNING)
    llm.script(text("Hello."))
    urls = f"unix://{one},unix://{two}"
    own = {**OWN, "code_timeout_s": 5, "code_max_timeout_s": 30}
    async with running_bot(tmp_path, tg, llm, code_sandbox_urls=urls, **own) as h:
        tg.push_text(OWNER, "hi")
        await h.final_text(OWNER, "Hello.")
        assert (
            "Each run: 5 s of wall clock unless timeout_ms says otherwise (at most 20 s), 300 MB of memory "
            "for all its processes, without network." in code_description(llm)
        )
    lines = overruled(caplog)
    assert (
        f"CODE_MEMORY_MB=512 is ignored: the sandbox service at unix://{one} bounds a run at 300 MB" in lines
    )
    assert (
        f"CODE_MEMORY_MB=512 is ignored: the sandbox service at unix://{two} bounds a run at 400 MB" in lines
    )
    assert not any("CODE_TIMEOUT_S" in line and f"unix://{one}" in line for line in lines), "5 s agrees"
    assert any("CODE_MAX_TIMEOUT_S=30" in line and f"unix://{two}" in line for line in lines)


async def test_a_service_that_comes_up_later_is_followed_once_it_answers(
    tmp_path: Path,
    tg: FakeTelegram,
    llm: FakeLLM,
    service: Callable[..., Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The bot may start before its sandbox service (compose starts both at once)."""
    sock = tmp_path / "run" / "sandbox.sock"
    caplog.set_level(logging.WARNING)
    llm.script(
        tool_calls(call("code", {"action": "execute", "code": "print(6 * 7)"})),
        text("Ran it."),
    )
    async with running_bot(tmp_path, tg, llm, code_sandbox_socket=str(sock), **OWN) as h:
        assert overruled(caplog) == []  # nothing known yet
        assert service("--memory-mb", "256") == sock
        tg.push_text(OWNER, "compute")
        await h.final_text(OWNER, "Ran it.")
        assert tool_result(llm)["stdout"] == "42\n"
        assert f"CODE_MEMORY_MB=512 is ignored: the sandbox service at {sock} bounds a run at 256 MB" in (
            overruled(caplog)
        )
        # From now on the model is told the service's limits.
        assert "256 MB of memory for all its processes" in code_description(llm)


async def test_the_tool_timeout_follows_the_services_longest_run(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, service: Callable[..., Path]
) -> None:
    """Operators had to keep CODE_MAX_TIMEOUT_S equal to the service's --max-timeout by hand: the bot cut a
    run the service allows (here after 1 + 30 s, the tool's margin) when they differed."""
    sock = service("--timeout", "5", "--max-timeout", "60")
    program = "import time; time.sleep(33); print('done')"
    llm.script(
        tool_calls(call("code", {"action": "execute", "code": program, "timeout_ms": 50_000})),
        text("Finished."),
    )
    settings = {"code_max_timeout_s": 1, "code_generate_wait_s": 0, "code_queue_wait_s": 0}
    async with running_bot(tmp_path, tg, llm, code_sandbox_socket=str(sock), **settings) as h:
        tg.push_text(OWNER, "a long one")
        await h.final_text(OWNER, "Finished.", timeout=120)
        result = tool_result(llm)
        assert result.get("success") is True and result["stdout"] == "done\n", result
