"""The only package that imports openai: chat completions (chat), transcription and speech (audio), and the
caps and log every request is held to (accounting)."""

from core_tools.llm.accounting import BudgetGate, BudgetHold, LLMCallRecorder, estimate_tokens
from core_tools.llm.audio import AudioClient
from core_tools.llm.chat import BACKGROUND_PURPOSES, DeltaCallback, LLMClient

__all__ = [
    "BACKGROUND_PURPOSES",
    "AudioClient",
    "BudgetGate",
    "BudgetHold",
    "DeltaCallback",
    "LLMCallRecorder",
    "LLMClient",
    "estimate_tokens",
]
