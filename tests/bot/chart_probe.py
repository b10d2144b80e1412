"""Run in a fresh interpreter by tests/bot/test_charts.py: does a plain turn load the plotting code?

`python -m tests.bot.chart_probe DIR` starts the real bot (tests/support/harness.py) against the loopback
fakes with a database under DIR, answers a plain message, notes which of the plotting modules are loaded, then
asks /usage (which draws a chart) and notes them again. It prints one JSON line: {"after_turn": {...},
"after_usage": {...}} mapping each module name to whether it was in sys.modules.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tests.support.fakes.openai_api import FakeLLM, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, TOKEN, running_bot

PLOTTING = ("PIL", "PIL.Image", "bot.adapter.charts")


def loaded() -> dict[str, bool]:
    """Which plotting modules this process has imported."""
    return {name: name in sys.modules for name in PLOTTING}


async def probe(tmp: Path) -> dict[str, dict[str, bool]]:
    """Answer a plain message, then /usage, noting the plotting modules after each."""
    async with FakeTelegram(token=TOKEN) as tg, FakeLLM() as llm:
        llm.script(text("Hello there."))
        async with running_bot(tmp, tg, llm) as h:
            tg.push_text(OWNER, "hello")
            await h.final_text(OWNER, "Hello there.")
            after_turn = loaded()
            tg.push_text(OWNER, "/usage")
            await tg.wait_for_call("sendPhoto", timeout=60)
            return {"after_turn": after_turn, "after_usage": loaded()}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(probe(Path(sys.argv[1])))))
