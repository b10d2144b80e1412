"""Plain dataclasses that cross package boundaries (no telegram or openai types here)."""

from __future__ import annotations

import base64
import json
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Generic, Protocol, TypeVar

R = TypeVar("R")


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


_CHAT_TYPES = frozenset(t.value for t in ChatType)


def chat_type_of(user_id: int, chat_id: int, chat_type: str | None) -> str:
    """A known chat type as a string; when unknown, private only for the user's own chat id."""
    if chat_type in _CHAT_TYPES:
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
    # Memories (as core_tools/memory/views.py shows them) a tool put before the model: the turn's "why
    # this answer" lists them with those recalled into its prompt (core_tools/turn_info.py).
    recalled: Callable[[Sequence[dict[str, Any]]], None] | None = None


@dataclass(frozen=True)
class ToolCallRequest:
    """One tool call as the model asked for it."""

    id: str
    name: str
    arguments: str  # raw JSON text, as the model produced it

    def repeat_key(self) -> str:
        """The same tool with the same arguments (key order aside) gives the same key: how a tool loop
        notices the model asking for one call again and again."""
        try:
            args = json.dumps(json.loads(self.arguments or "{}"), sort_keys=True)
        except json.JSONDecodeError:
            args = self.arguments
        return f"{self.name}:{args}"


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
class UnrecordedCall(Generic[R]):
    """A successful LLM request whose usage record (db.usage.LLMCallRecord: this module imports no database)
    its caller stores with rows of its own (a turn's answer and its usage in one transaction). Until
    `stored` or `store_alone` its budget reservation stays held, so a parallel request's check counts its
    spend once: as reserved, then as recorded."""

    record: R
    _store: Callable[[R], None]
    _release: Callable[[], None]
    done: bool = False

    def stored(self) -> None:
        """The caller stored `record` (committed): release the reservation."""
        if not self.done:
            self.done = True
            self._release()

    def store_alone(self) -> None:
        """Store the record by itself (the caller's transaction did not happen), then release; a no-op once
        settled."""
        if self.done:
            return
        self.done = True
        try:
            self._store(self.record)
        finally:
            self._release()


@dataclass
class LLMReply:
    """A finished (streamed) assistant reply."""

    content: str
    tool_calls: list[ToolCallRequest] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    finish_reason: str | None = None
    model: str = ""
    # The request had images but they were left out: the endpoint cannot see images (LLM_VISION).
    images_dropped: bool = False
    # Set when the caller asked to store the usage record itself (LLMClient.complete(defer_record=True)).
    unrecorded: UnrecordedCall[Any] | None = None


@dataclass(slots=True)
class ChatMessage:
    """One message in the prompt, in the OpenAI chat shape but as plain data.

    Not changed once built (`dataclasses.replace` makes a changed copy). Not declared frozen: a frozen
    dataclass's constructor costs four times as much, and every turn builds one per history message."""

    role: str  # "system" | "user" | "assistant" | "tool"
    content: str | None
    tool_calls: tuple[ToolCallRequest, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None
    # User messages: images as data URLs, sent as `image_url` parts after the text (the caption).
    images: tuple[str, ...] = ()
    # `to_openai` as the LLM client encoded it (core_tools/llm/chat.py), kept: a history's messages are the
    # same objects turn after turn (core_tools/agent/history.py), so a request encodes only what is new.
    encoded: Any = field(default=None, init=False, repr=False, compare=False)

    def to_openai(self) -> dict[str, Any]:
        """Return the dict the chat.completions API takes."""
        content: Any = self.content
        if self.images:
            content = [{"type": "text", "text": self.content or ""}] + [
                {"type": "image_url", "image_url": {"url": url}} for url in self.images
            ]
        msg: dict[str, Any] = {"role": self.role, "content": content}
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


@dataclass(frozen=True)
class ImagePart:
    """An image the user sent, for the model: its bytes and MIME type (a data URL is built from them)."""

    data: bytes
    mime_type: str = "image/jpeg"
    name: str = "photo.jpg"

    def data_url(self) -> str:
        """The base64 data URL of the image."""
        return f"data:{self.mime_type};base64,{base64.b64encode(self.data).decode('ascii')}"


@dataclass(frozen=True)
class InputFile:
    """A file the user sent, as the turn sees it: its original name, bytes and MIME type."""

    name: str
    data: bytes
    mime_type: str | None = None


@dataclass(frozen=True)
class OutputFile:
    """A file a code run wrote under out/, to be sent to the chat (images as photos, others as documents)."""

    name: str
    data: bytes

    @property
    def is_image(self) -> bool:
        """Whether it goes to the chat as a photo."""
        return self.name.lower().rsplit(".", 1)[-1] in {"png", "jpg", "jpeg", "gif", "webp"}


class FileSink(Protocol):
    """Where files a tool produced go (the chat in the app)."""

    async def send_files(
        self, chat_id: int, files: list[OutputFile], skipped: Sequence[str] = ()
    ) -> list[str]:
        """Send the files, then tell the chat which were not sent and why (`skipped`, as "name (size): why",
        and any it could not send); return a line per file that could not be sent (empty when all went)."""
        ...
