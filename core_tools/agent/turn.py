"""A turn's shapes: what comes in (TurnInput), what goes out (TurnResult), how a front end follows and
stops it (TurnSink, TurnControl), and the bounds and hooks the loop is given (AgentConfig, TurnBudget,
PromptContext, TurnObserver)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from core_tools.guest import GUEST_CHAT_TYPE, GUEST_TOOLS
from core_tools.turn_info import PromptSection
from core_tools.types import ToolOutcome, chat_type_of, is_private
from db.runtime import TurnMark
from db.speakers import Speaker


class TurnSink(Protocol):
    """Where a turn shows its progress (a Telegram message being edited, a terminal, a test)."""

    async def text(self, partial: str) -> None:
        """The answer so far (the whole text, not a delta)."""

    async def status(self, line: str) -> None:
        """A one-line status such as "running code..."; renewed while a long tool works (a code run: about
        every second, with its elapsed time and last line of output), so a sink shows only the latest."""


class TurnBudget(Protocol):
    """Usage caps as the turn loop sees them (core_tools.usage.UsageService in the app)."""

    def check(self, user_id: int | None, purpose: str = "chat") -> None:
        """Raise BudgetExceeded when the user may not start a request."""

    def over_budget(self, user_id: int) -> str | None:
        """Why the user is over a cap, or None; asked before each further tool round."""

    def turn_stopped(self, user_id: int, session_id: str, reason: str) -> None:
        """Count a turn whose tool use was stopped (chain_limit, repeat_guard, budget)."""


class PromptContext(Protocol):
    """A section of a turn's system prompt (the previous session's summary: core_tools/sessions.py; the
    recalled memories: core_tools/memory/prompt.py); "" adds none. A PromptSection also says which memories
    it put there (the turn's "why this answer"). Built once by the composition root and given to the Agent,
    which asks each at a turn's start with the turn's user, session and text (every message of a burst)."""

    async def section(self, user_id: int, session_id: str, message: str) -> str | PromptSection: ...


class TurnObserver(Protocol):
    """Told of a private turn's user message at the turn's start, once its system prompt is built (memory
    extraction: core_tools/memory/extract.py, `MemoryExtractor.note_turn`); its return value is ignored."""

    def __call__(self, user_id: int, session_id: str, message: str) -> None: ...


@dataclass
class AgentConfig:
    """Bounds of a turn."""

    max_tool_rounds: int = 8
    history_token_budget: int = 8000
    history_max_messages: int = 200  # rows read per request; the token budget usually binds first
    turn_timeout_s: float = 300.0
    default_timezone: str = "UTC"
    # Tools that read or change the user's private data: not offered, and refused, outside private chats.
    private_tools: frozenset[str] = frozenset({"memory"})
    # The only tools a guest turn (core_tools/guest.py) is offered and may call.
    guest_tools: frozenset[str] = GUEST_TOOLS


@dataclass
class TurnResult:
    """What a turn produced."""

    text: str
    # "chain_limit" | "repeat_guard" when loop protection ended tool use, "budget" when a usage cap did
    stopped_by: str | None = None
    tool_calls: int = 0
    outcomes: list[ToolOutcome] = field(default_factory=list)
    # Images were left out because the model cannot see them (LLM_VISION=off, or auto after a refusal).
    images_dropped: bool = False
    # The stored answer's message id (the key of its "why this answer" record), None when none was stored.
    answer_id: int | None = None


@dataclass
class TurnControl:
    """Shared between a running turn and its front end: how to stop it, what it stored, what it showed."""

    stop_requested: bool = False
    message_ids: list[int] = field(default_factory=list)  # the turn's user messages
    partial: str = ""  # the answer text streamed so far
    # Awaited after each model reply, before it is stored or its tools run: the front end raises
    # CancelledError there when the turn must not go on (bot/runtime/runner.py: its chat went to another
    # process).
    checkpoint: Callable[[], Awaitable[None]] | None = None
    handed_over: bool = False  # cancelled because another process owns the turn's messages now
    # Set at the model's first token (or first reply): from then on the chat sees this turn. Before it, a
    # message that arrives may be folded in (`folded`): the turn is cancelled, its messages kept as
    # answered, and the chat's next turn answers them together with the new one (bot/runtime/runner.py).
    acted: bool = False
    folded: bool = False
    # The turn as published on its chat's lease (bot/runtime): stored with the turn's messages and cleared
    # with its outcome, in the same transactions. `published` while the lease still shows it.
    mark: TurnMark | None = None
    published: bool = False
    # The turn's time limit, suspended while calls wait for the user's approval (`suspend_limit`).
    limit: asyncio.Timeout | None = None
    _waiting: int = 0  # calls waiting for approval now
    _left_s: float | None = None  # what was left of the time limit when the first of them began

    def suspend_limit(self) -> None:
        """A call begins waiting for the user: the turn's time limit stops running until none waits."""
        self._waiting += 1
        limit = self.limit
        if self._waiting != 1 or limit is None or limit.expired():
            return
        when = limit.when()
        if when is not None:
            self._left_s = when - asyncio.get_running_loop().time()
            limit.reschedule(None)

    def resume_limit(self) -> None:
        """A call ended its wait: the time limit runs again (with what was left) once none waits."""
        self._waiting -= 1
        limit, left = self.limit, self._left_s
        if self._waiting == 0 and limit is not None and left is not None:
            self._left_s = None
            if not limit.expired():
                limit.reschedule(asyncio.get_running_loop().time() + left)


@dataclass(frozen=True)
class TurnInput:
    """Who is asking, where (`speaker`: its chat type a ChatType value, or None when unknown, which counts as
    private only in the user's own chat id), and what."""

    speaker: Speaker
    text: str
    tg_message_id: int | None = None  # Telegram's id of the message, so an edit can find it
    # Further messages of a burst answered in this same turn: (text, Telegram id), each stored on its own.
    more: tuple[tuple[str, int | None], ...] = ()
    # Answer this stored user message again (/retry, an edit) instead of storing `text` as a new one;
    # its previous answer is kept but superseded (left out of the history).
    rerun_of: int | None = None
    model: str | None = None  # the chat's model; None: the LLM client's default
    inbox_ids: tuple[int, ...] = ()  # where the messages waited (db/runtime/inbox.py): taken out when stored

    # Messages of a turn folded into this one (stored already; `TurnControl.folded`): recalled with it.
    earlier: tuple[str, ...] = ()

    @property
    def all_text(self) -> str:
        """Every message of the turn, in order (for memory recall and tool context)."""
        return "\n\n".join([*self.earlier, self.text, *(t for t, _ in self.more)])

    # What the turn's LLM requests are accounted as ("scheduled" for a scheduled task's turn).
    purpose: str = "chat"
    # Rows of media_files (voice, photos, documents) that came with this message, linked once it is stored.
    media_ids: tuple[int, ...] = ()
    more_media: tuple[tuple[int, ...], ...] = ()  # the same for each message of `more`, in order
    # A guest turn (core_tools/guest.py): its answer goes into someone else's chat, so its prompt has no
    # memories, summaries or notes, and only the guest tools are offered.
    guest: bool = False

    @property
    def user_id(self) -> int:
        return self.speaker.user_id

    @property
    def chat_id(self) -> int:
        return self.speaker.chat_id

    @property
    def kind(self) -> str:
        """The chat type, resolved (see chat_type_of); "guest" for a guest turn."""
        if self.guest:
            return GUEST_CHAT_TYPE
        return chat_type_of(self.speaker.user_id, self.speaker.chat_id, self.speaker.chat_type)

    @property
    def private(self) -> bool:
        """Whether the turn is in the user's private chat, where their memories may be used."""
        return not self.guest and is_private(self.kind, self.user_id, self.chat_id)
