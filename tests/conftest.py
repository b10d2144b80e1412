"""Shared fixtures: the loopback fakes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.fakes.openai_api import FakeLLM
from tests.fakes.telegram_api import FakeTelegram
from tests.harness import TOKEN


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    """A fake Bot API server."""
    async with FakeTelegram(token=TOKEN) as server:
        yield server


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLM]:
    """A fake OpenAI-compatible server."""
    async with FakeLLM() as server:
        yield server
