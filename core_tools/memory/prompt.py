"""The memories a private turn's system prompt recalls (core_tools.agent's PromptContext): the user's
relevant long and mid memories and this session's, as one quoted-data block within a character budget."""

from __future__ import annotations

from core_tools.memory.store import MemoryStore
from core_tools.turn_info import PromptSection


class RecalledMemories:
    """The memory block of a turn's prompt (MemoryStore.prompt_section), with the memories it used (a turn's
    "why this answer": core_tools/turn_info.py); nothing when the budget is 0 (MEMORY_PROMPT_BUDGET_CHARS).

    Private: the Agent asks it in the user's private chat only (its `private_context`)."""

    def __init__(self, memory: MemoryStore, budget_chars: int) -> None:
        self.memory = memory
        self.budget_chars = budget_chars

    async def section(self, user_id: int, session_id: str, message: str) -> str | PromptSection:
        if not self.budget_chars:
            return ""
        return await self.memory.prompt_section(user_id, session_id, message, self.budget_chars)
