"""The OpenAI SDK is imported at a client's first request, not with core_tools.llm nor when the bot is
built (core_tools/llm/sdk.py): its import was the largest share of a start-up (issue 32 §7)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# A fresh interpreter: the bot's modules, the clients built, then one request to the fake LLM.
PROGRAM = """
import asyncio, sys
import bot.process.fronts, bot.adapter.app
from core_tools.llm import AudioClient, LLMClient
from core_tools.types import ChatMessage
from tests.support.fakes.openai_api import FakeLLM, text

async def main():
    async with FakeLLM() as llm:
        llm.default = text("hello")
        client = LLMClient(base_url=llm.base_url, api_key="k", model="m")
        audio = AudioClient(base_url=llm.base_url, api_key="k", model="whisper")
        print("built", "openai" in sys.modules)
        reply = await client.complete([ChatMessage("user", "hi")])
        print("answered", reply.content, "openai" in sys.modules)
        await client.close()
        await audio.close()

asyncio.run(main())
"""


def test_the_sdk_is_imported_at_the_first_request() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split("\n")[:2] == ["built False", "answered hello True"], done.stdout
