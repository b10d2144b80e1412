"""What a turn used, gathered while it runs: the memories recalled into it (by a prompt section or the
memory tool), its LLM requests
(model, tokens, cost), its tool calls and its duration; stored with its answer (db/turn_info.py) for the
"why this answer" view."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from core_tools.types import ToolCallRequest, ToolOutcome
from db.turn_info import RecalledMemory, ToolUse, TurnInfoRecord
from db.usage import LLMCallRecord

ARGUMENTS_CHARS = 500  # a tool call's arguments as kept for the view (a code run's code can be long)
MEMORY_CHARS = 300  # a recalled memory's text as kept for the view
MAX_TOOLS = 50  # tool calls kept per turn (MAX_TOOL_ROUNDS bounds them anyway)
MAX_MEMORIES = 60  # recalled memories kept per turn (the prompt's budget and the tool's limit bound them)

# USD of one LLM request from its usage record; None when its model has no price.
CostOf = Callable[[LLMCallRecord], float | None]


@dataclass(frozen=True)
class PromptSection:
    """A prompt context's section of the system prompt (core_tools/agent/turn.py, PromptContext), with the
    memories it put there (a prompt context may also return plain text: no memories)."""

    text: str
    memories: tuple[RecalledMemory, ...] = ()


def recalled(memories: Sequence[dict[str, Any]]) -> tuple[RecalledMemory, ...]:
    """Memory views (core_tools/memory/views.py) as the turn's record keeps them."""
    out = []
    for m in memories:
        text = str(m.get("content") or "")
        if len(text) > MEMORY_CHARS:
            text = text[: MEMORY_CHARS - 1] + "…"
        out.append(RecalledMemory(str(m["id"]), text))
    return tuple(out)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class TurnTally:
    """A running turn's usage so far."""

    cost_of: CostOf | None = None
    started: float = field(default_factory=time.monotonic)
    memories: list[RecalledMemory] = field(default_factory=list)
    models: list[str] = field(default_factory=list)
    api_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    tokens_estimated: bool = False
    cost: float | None = 0.0
    tools: list[ToolUse] = field(default_factory=list)

    def add_memories(self, memories: Sequence[RecalledMemory]) -> None:
        """Memories a prompt section recalled (each once)."""
        known = {m.id for m in self.memories}
        for m in memories:
            if m.id not in known and len(self.memories) < MAX_MEMORIES:
                known.add(m.id)
                self.memories.append(m)

    def add_views(self, memories: Sequence[dict[str, Any]]) -> None:
        """Memories a tool recalled (memory views: the memory tool's `recall`)."""
        self.add_memories(recalled(memories))

    def add_call(self, record: LLMCallRecord | None, model: str) -> None:
        """One LLM request of the turn (`record`: its usage, None when it has none)."""
        self.api_calls += 1
        name = record.model if record is not None else model
        if name and name not in self.models:
            self.models.append(name)
        if record is None:
            return
        self.prompt_tokens += record.prompt_tokens
        self.completion_tokens += record.completion_tokens
        self.cached_tokens += record.cached_tokens
        self.tokens_estimated = self.tokens_estimated or record.tokens_estimated
        price = self.cost_of(record) if self.cost_of is not None else None
        # One request without a price makes the turn's cost unknown, not smaller than it was.
        self.cost = None if price is None or self.cost is None else self.cost + price

    def add_tools(self, calls: Sequence[ToolCallRequest], outcomes: Sequence[ToolOutcome]) -> None:
        """One round's tool calls and whether each succeeded."""
        ok = {o.call_id: o.ok for o in outcomes}
        for c in calls:
            if len(self.tools) < MAX_TOOLS:
                self.tools.append(
                    ToolUse(c.name, _cut(c.arguments or "", ARGUMENTS_CHARS), ok.get(c.id, False))
                )

    def record(self, user_id: int, chat_id: int, user_message_id: int) -> TurnInfoRecord:
        """The turn's record, as stored with its answer."""
        return TurnInfoRecord(
            user_id=user_id,
            chat_id=chat_id,
            user_message_id=user_message_id,
            model=", ".join(self.models) or "?",
            api_calls=self.api_calls,
            duration_ms=int((time.monotonic() - self.started) * 1000),
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cached_tokens=self.cached_tokens,
            tokens_estimated=self.tokens_estimated,
            cost_usd=self.cost,
            memories=tuple(self.memories),
            tools=tuple(self.tools),
        )
