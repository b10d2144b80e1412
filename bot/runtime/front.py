"""What the turn runtime needs of the front end its chats are answered in, handed to it at construction (the
way httpx takes a transport): a reply that streams a turn and then shows how it ended, a "typing" sign while
the chat waits for an answer, and a line said to a chat on its own.

The Telegram adapter (bot/adapter/front.py) and the terminal (bot/terminal/front.py) implement it; a new front
end is an implementation of these three, not a turn driver of its own. A chat is a conversation key
(db/topics.py): the front end knows where that is (a Telegram chat, a forum topic, the terminal)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Protocol

from core_tools.agent import TurnResult, TurnSink

if TYPE_CHECKING:
    from bot.runtime.queue import Incoming


class TurnReply(TurnSink, Protocol):
    """One turn's reply: the agent streams into it (TurnSink), then the runtime has it show the ending."""

    @property
    def shown(self) -> bool:
        """Whether anything of the turn reached the chat yet (a text, a status line)."""

    async def end(self, task: asyncio.Task[TurnResult], batch: Sequence[Incoming], info_button: bool) -> None:
        """Show how the turn ended: its answer, that it was stopped, or why it failed
        (bot/runtime/endings.py). `batch`: the turn's messages (a voice note's transcript is quoted, its
        answer spoken)."""


class ChatFront(Protocol):
    """A front end as the turn runtime uses it."""

    def reply(self, head: Incoming, number: int, guard: Callable[[], Awaitable[bool]]) -> TurnReply:
        """The reply of turn `number` (its Stop button names it), answering `head`'s chat; `guard` is asked
        before anything is shown: False when the chat went to another process (show nothing more)."""

    def typing(self, chat_id: int, last_sent: float | None = None) -> AbstractAsyncContextManager[object]:
        """Show that an answer is coming while the block runs (`last_sent`: when it was last shown)."""

    async def tell(self, chat_id: int, text: str) -> None:
        """Say `text` in the chat on its own (a failing delivery is logged, never raised)."""
