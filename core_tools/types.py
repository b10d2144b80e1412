"""Plain dataclasses that cross package boundaries (no telegram or openai types here)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol


async def _no_progress(_status: str) -> None:
    return None


class Notifier(Protocol):
    """Sends a message to a chat outside of a running turn (background jobs, rollover notices)."""

    async def send(self, chat_id: int, text: str) -> None: ...


class ChatType(StrEnum):
    """The kind of chat a turn happens in (Telegram's chat types, as plain strings)."""

    PRIVATE = "private"
    GROUP = "group"
    SUPERGROUP = "supergroup"
    CHANNEL = "channel"


def is_private(chat_type: str, user_id: int, chat_id: int) -> bool:
    """Whether a chat is the user's own: private type and the user's id (Telegram's private chat id)."""
    # Both must hold: a wrong or missing type never opens the user's private memories to a shared chat.
    return chat_type == ChatType.PRIVATE and chat_id == user_id


def chat_type_of(user_id: int, chat_id: int, chat_type: str | None) -> str:
    """A known chat type as a string; when unknown, private only for the user's own chat id."""
    if chat_type in {t.value for t in ChatType}:
        assert chat_type is not None
        return chat_type
    return ChatType.PRIVATE.value if chat_id == user_id else ChatType.GROUP.value


@dataclass(frozen=True)
class ToolContext:
    """What a tool knows about the turn that called it. Tools receive it as their `ctx` parameter."""

    user_id: int
    chat_id: int
    session_id: str
    trigger_message: str = ""
    # The assistant text that accompanied the tool call (the model's stated reasoning), if any.
    reasoning: str | None = None
    # Shows a one-line status ("running code...") in the chat while the tool works.
    progress: Callable[[str], Awaitable[None]] = _no_progress
    # "private" | "group" | "supergroup" | "channel" (ChatType); private data stays out of shared chats.
    chat_type: str = ChatType.PRIVATE.value
    # The turn's first user message id: background work started by the turn is cancelled with it (/stop).
    turn_id: int | None = None


@dataclass(frozen=True)
class ToolCallRequest:
    """One tool call as the model asked for it."""

    id: str
    name: str
    arguments: str  # raw JSON text, as the model produced it


@dataclass(frozen=True)
class ToolOutcome:
    """The result of one tool call as it goes back to the model."""

    call_id: str
    name: str
    ok: bool
    content: str  # JSON text given to the model
    duration_ms: int
    error: str | None = None


@dataclass
class Usage:
    """Token counts of one LLM call; `estimated` when the server did not report them."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    estimated: bool = False


@dataclass
class LLMReply:
    """A finished (streamed) assistant reply."""

    content: str
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    model: str = ""


@dataclass(frozen=True)
class ChatMessage:
    """One message in the prompt, in the OpenAI chat shape but as plain data."""

    role: str  # "system" | "user" | "assistant" | "tool"
    content: str | None
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None

    def to_openai(self) -> dict[str, Any]:
        """Return the dict the chat.completions API takes."""
        msg: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            msg["tool_call_id"] = self.tool_call_id
        if self.name is not None and self.role == "tool":
            msg["name"] = self.name
        return msg
