"""Loopback HTTP fakes of the Telegram Bot API and an OpenAI-compatible LLM server for tests."""

from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.telegram_api import Call, FakeTelegram

__all__ = ["Call", "FakeLLM", "FakeTelegram"]
