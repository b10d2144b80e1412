"""The only package that imports openai: chat completions (chat), transcription and speech (audio), and the
caps and log every request is held to (accounting); what callers ask of a chat model (model.ChatModel) and
in-process models for tests (testing)."""

from core_tools.llm.accounting import BudgetGate, BudgetHold, DeltaCallback, LLMCallRecorder, estimate_tokens
from core_tools.llm.audio import AudioClient
from core_tools.llm.chat import BACKGROUND_PURPOSES, LLMClient
from core_tools.llm.model import ChatClient, ChatModel

__all__ = [
    "BACKGROUND_PURPOSES",
    "AudioClient",
    "BudgetGate",
    "BudgetHold",
    "ChatClient",
    "ChatModel",
    "DeltaCallback",
    "LLMCallRecorder",
    "LLMClient",
    "estimate_tokens",
]
