"""Stopping a chat's running turn, wherever it runs: here by cancelling its task, in another process by a
request on the chat's lease (db/runtime/store.py) that the replica loop there passes on (`stop_here`).

A turn is stopped only by the person who asked or by the owner; a Stop button names its own turn, so a
button under an answer that already finished stops nothing newer.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from bot.runtime.endings import NOT_YOURS, NOTHING_RUNS
from core_tools.agent import TurnControl, TurnResult
from db.runtime import RuntimeStore

FINISHED = "That answer is already finished."
STOP_WAIT_S = 20.0  # how long a /stop waits for another process to end the turn
STOP_POLL_S = 0.05


@dataclass
class Running:
    """The turn a chat is running here."""

    number: int  # unique across processes (an inbox id is not: SQLite reuses them)
    owner_id: int
    control: TurnControl
    task: asyncio.Task[TurnResult]
    released: asyncio.Event = field(default_factory=asyncio.Event)  # the turn and its jobs are gone


class Stops:
    """/stop and the Stop button: `running_here` tells the turn a chat runs in this process, if any."""

    def __init__(self, store: RuntimeStore, running_here: Callable[[int], Running | None]) -> None:
        self.store = store
        self.running_here = running_here

    def stop_here(self, chat_id: int, number: int) -> bool:
        """Stop turn `number` of a chat if it runs in this process (a /stop another process received)."""
        running = self.running_here(chat_id)
        if running is None or running.number != number:
            return False
        running.control.stop_requested = True
        running.task.cancel()
        return True

    async def stop(self, chat_id: int, user_id: int, is_owner: bool, number: int | None = None) -> str | None:
        """Stop the chat's running turn (`number`: only that one, for a Stop button), wherever it runs;
        returns what to tell the user, or None when the stopped answer itself says it. Returns once the
        turn is released: its LLM stream closed, its tool calls (and sandbox runs) and background jobs
        cancelled (in another process: once it reports the turn ended)."""
        running = self.running_here(chat_id)
        if running is None:
            return await self._stop_elsewhere(chat_id, user_id, is_owner, number)
        if number is not None and running.number != number:
            return FINISHED
        if running.owner_id != user_id and not is_owner:
            return NOT_YOURS.format(action="stop")
        running.control.stop_requested = True
        running.task.cancel()
        await running.released.wait()
        return None

    async def _stop_elsewhere(
        self, chat_id: int, user_id: int, is_owner: bool, number: int | None
    ) -> str | None:
        remote = self.store.running(chat_id)
        if remote is None or (number is not None and remote.turn != number):
            return NOTHING_RUNS if number is None else FINISHED
        if remote.owner != user_id and not is_owner:
            return NOT_YOURS.format(action="stop")
        if not self.store.request_stop(chat_id, remote.turn):
            return None  # it ended meanwhile
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_WAIT_S
        while loop.time() < deadline:
            now = self.store.running(chat_id)
            if now is None or now.turn != remote.turn:
                return None
            await asyncio.sleep(STOP_POLL_S)
        return "I asked the turn to stop; it has not ended yet."
