"""Loopback HTTP fakes of the Telegram Bot API and an OpenAI-compatible LLM server for tests."""

from tests.fakes.openai_api import FakeLLM
from tests.fakes.telegram_api import Call, FakeTelegram

__all__ = ["Call", "FakeLLM", "FakeTelegram"]
