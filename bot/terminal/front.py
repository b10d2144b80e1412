"""The terminal as the turn runtime's front end (bot/runtime/front.py): a turn's answer streams after its
prefix; how it ended (stopped, failed, its notes) follows it; there is no "typing" sign."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager

from bot.runtime.endings import NO_ANSWER, STOP_NOTES, STOPPED_MARK, turn_failure_text
from bot.runtime.queue import Incoming
from bot.terminal.console import Console
from core_tools.agent import TurnResult
from core_tools.errors import BudgetExceeded, LLMUnavailable

log = logging.getLogger(__name__)


class TerminalReply:
    """A turn's reply in the terminal: its prefix once something is shown, the text as it streams, status
    lines in brackets, then how the turn ended."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.printed = 0
        self.started = False

    @property
    def shown(self) -> bool:
        return self.started

    def _start(self) -> None:
        if not self.started:
            self.started = True
            self.console.answer_start()

    async def text(self, partial: str) -> None:
        """Print what is new since the last call."""
        self._start()
        if len(partial) < self.printed:  # a new round started over
            self.console.answer_restart()
            self.printed = 0
        self.console.answer(partial[self.printed :])
        self.printed = len(partial)

    async def status(self, line: str) -> None:
        """Print a status line."""
        self._start()
        self.console.notice(f"[{line}]")
        self.printed = 0

    async def end(self, task: asyncio.Task[TurnResult], batch: Sequence[Incoming], info_button: bool) -> None:
        self._start()
        self.console.answer_end(self._ending(task))

    def _ending(self, task: asyncio.Task[TurnResult]) -> str | None:
        """What follows the streamed text: the answer if nothing streamed, how the turn ended."""
        if task.cancelled():
            return STOPPED_MARK
        exc = task.exception()
        if exc is not None:
            if not isinstance(exc, BudgetExceeded | LLMUnavailable | TimeoutError):
                log.error("error while answering in the terminal", exc_info=exc)
            return turn_failure_text(exc)
        result = task.result()
        if result.stopped_by == "user":
            return STOPPED_MARK
        notes = [] if self.printed else [result.text.strip() or NO_ANSWER]
        if result.stopped_by in STOP_NOTES:
            notes.append(STOP_NOTES[result.stopped_by])
        return "\n\n".join(notes) or None


class TerminalFront:
    """The runtime's ChatFront on the console."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def reply(self, head: Incoming, number: int, guard: Callable[[], Awaitable[bool]]) -> TerminalReply:
        return TerminalReply(self.console)

    def typing(self, chat_id: int, last_sent: float | None = None) -> AbstractAsyncContextManager[object]:
        return contextlib.nullcontext()

    async def tell(self, chat_id: int, text: str) -> None:
        self.console.notice(text)
