"""Guest turns: a question asked in guest or inline mode, answered without the user's private data
(core_tools/guest.py) and shown where it was asked (bot/adapter/guest.py, inline.py know where).

A guest turn has no chat of the user's to queue in: each is a conversation of its own (a fresh conversation
key), so it needs no chat lease and no inbox. It still goes through the agent like any turn: its messages,
tool calls, code runs and LLM requests are stored and accounted (purpose "guest" or "inline"), caps apply
before any request, and /stop (or the answer's Stop button) stops it. Its session is ended with the turn,
so nothing of it reaches a later one, and no rollover summarises it."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from bot.runtime.endings import NOT_YOURS, STOP_NOTES, turn_failure_text
from bot.runtime.stops import FINISHED
from core_tools.agent import Agent, TurnControl, TurnInput, TurnResult, TurnSink
from core_tools.aio import settled
from core_tools.errors import BudgetExceeded, LLMUnavailable
from core_tools.guest import GUEST_CHAT_TYPE, guest_key
from db.conversations import Conversations
from db.guest_links import PRIVATE, GuestLinks, Question
from db.speakers import Speaker

log = logging.getLogger(__name__)

NOTHING_RUNS_AS_GUEST = "No answer of yours is being written as a guest, so there is nothing to stop."


@dataclass
class GuestRun:
    """A guest turn running in this process."""

    number: int
    owner_id: int
    control: TurnControl
    task: asyncio.Task[TurnResult]
    ended: asyncio.Event = field(default_factory=asyncio.Event)  # its session ended too


@dataclass(frozen=True)
class GuestOutcome:
    """How a guest turn ended: "answered", "stopped" (by the user) or "failed", and the text to show."""

    status: str
    text: str


class GuestTurns:
    """Runs guest turns and stops them; keeps the questions behind "continue in private" links."""

    def __init__(
        self,
        agent: Agent,
        conversations: Conversations,
        links: GuestLinks,
        *,
        ttl_s: float,
        model_for: Callable[[int], str | None] = lambda user_id: None,
    ) -> None:
        self.agent = agent
        self.conversations = conversations
        self.links = links
        self.ttl_s = ttl_s
        self.model_for = model_for  # the model of the user's private chat
        self._running: dict[int, GuestRun] = {}
        self._quiet: dict[int, asyncio.Event] = {}  # users whose data is being erased (`quiet`)

    async def _db(self, call: Callable[[], object]) -> object:
        return await settled(call, off_loop=self.conversations.over_network)

    async def link(self, user_id: int, question: str, kind: str = PRIVATE) -> str:
        """A token for the question (kind PRIVATE: /start <token> runs it in the private chat)."""
        return await settled(
            lambda: self.links.make(user_id, kind, question, self.ttl_s),
            off_loop=self.conversations.over_network,
        )

    async def take(self, token: str, kind: str, user_id: int) -> Question | None:
        """The question behind a token of the user's, used once (None: unknown, someone else's, used, or
        expired)."""
        return await settled(
            lambda: self.links.take(token, kind, user_id), off_loop=self.conversations.over_network
        )

    @staticmethod
    def number() -> int:
        """A new guest turn's number (its Stop button names it)."""
        return secrets.randbits(48)

    async def run(
        self,
        number: int,
        user_id: int,
        question: str,
        purpose: str,
        sink: TurnSink,
        *,
        first_name: str | None = None,
        username: str | None = None,
    ) -> GuestOutcome:
        """Answer `question` as a guest turn (purpose "guest" or "inline"), streaming into `sink`."""
        while user_id in self._quiet:  # their data is being erased: the turn starts afterwards
            await self._quiet[user_id].wait()
        key = guest_key()
        turn = TurnInput(
            Speaker(user_id, key, GUEST_CHAT_TYPE, first_name, username),
            question,
            model=self.model_for(user_id),
            purpose=purpose,
            guest=True,
        )
        control = TurnControl()
        task = asyncio.create_task(self.agent.run_turn(turn, sink, control))
        run = self._running[number] = GuestRun(number, user_id, control, task)
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:  # shutdown: the turn goes with the handler (stored as interrupted)
            task.cancel()
            await asyncio.wait({task})
            raise
        finally:
            try:
                await self._end(user_id, key)
            finally:
                del self._running[number]
                run.ended.set()
        return self._outcome(task, control)

    async def _end(self, user_id: int, key: int) -> None:
        """End the guest turn's session: nothing of it is history for anything later."""
        conv = self.conversations

        def end() -> None:
            session = conv.current_session(user_id, key, chat_type=GUEST_CHAT_TYPE)
            conv.end_session(session.id)

        try:
            await self._db(end)
        except Exception:  # the answer is made; a session left open is only summarised empty later
            log.exception("could not end the session of a guest turn")

    @staticmethod
    def _outcome(task: asyncio.Task[TurnResult], control: TurnControl) -> GuestOutcome:
        if task.cancelled():
            return GuestOutcome("stopped", control.partial.strip())
        exc = task.exception()
        if exc is not None:
            if not isinstance(exc, BudgetExceeded | LLMUnavailable | TimeoutError):
                log.error("error while answering a guest query", exc_info=exc)
            return GuestOutcome("failed", turn_failure_text(exc))
        result = task.result()
        if result.stopped_by == "user":
            return GuestOutcome("stopped", result.text.strip())
        text = result.text.strip()
        note = STOP_NOTES.get(result.stopped_by or "")
        return GuestOutcome("answered", f"{text}\n\n{note}" if note else text)

    def stop(self, user_id: int, is_owner: bool, number: int | None = None) -> str | None:
        """Stop guest turn `number` (None: every guest turn of the user's) running here; returns what to
        tell the user, or None when one was stopped (its answer says so)."""
        if number is None:
            runs = [r for r in self._running.values() if r.owner_id == user_id]
            if not runs:
                return NOTHING_RUNS_AS_GUEST
        else:
            run = self._running.get(number)
            if run is None:
                return FINISHED
            if run.owner_id != user_id and not is_owner:
                return NOT_YOURS.format(action="stop")
            runs = [run]
        for run in runs:
            run.control.stop_requested = True
            run.task.cancel()
        return None

    @asynccontextmanager
    async def quiet(self, user_id: int) -> AsyncIterator[None]:
        """While the user's data is erased: their guest turns running here are stopped and have ended (and
        stored what they store) when this enters; a new one waits until it exits."""
        done = self._quiet.setdefault(user_id, asyncio.Event())
        try:
            runs = [r for r in self._running.values() if r.owner_id == user_id]
            for run in runs:
                run.control.stop_requested = True
                run.task.cancel()
            for run in runs:
                await run.ended.wait()
            yield
        finally:
            if self._quiet.get(user_id) is done:
                del self._quiet[user_id]
            done.set()

    def running(self, user_id: int) -> bool:
        """Whether a guest turn of the user's runs here."""
        return any(r.owner_id == user_id for r in self._running.values())
