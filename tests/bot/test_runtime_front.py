"""The turn runtime is front-end neutral: driven through a front end of a few lines, in a process that never
imports `telegram`, it answers a message, folds a burst and re-runs the last message."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tests.support.fakes.openai_api import FakeLLM, hang, text
from tests.support.processes import REPO, bot_env


async def test_the_runtime_drives_turns_through_any_front_end_without_telegram(
    tmp_path: Path, llm: FakeLLM
) -> None:
    llm.script(text("Hi Ann."), hang(60), text("Lisbon, and a hotel."), text("Hi again."))
    env = bot_env(tmp_path)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.support.fake_front",
        f"sqlite:///{tmp_path / 'front.db'}",
        llm.base_url,
        cwd=REPO,
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    await llm.wait_for_requests(2, timeout=120)  # the second turn's request waits at the model
    out, err = await asyncio.wait_for(proc.communicate(b"go\n"), 120)
    assert proc.returncode == 0, err.decode()[-3000:]
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert result["telegram"] is False
    assert result["shown"] == [
        {"messages": ["hello"], "answer": "Hi Ann."},
        {"messages": ["plan my trip", "and a hotel"], "answer": "Lisbon, and a hotel."},
        {"messages": ["and a hotel"], "answer": "Hi again."},  # /retry: the last message again
    ]
