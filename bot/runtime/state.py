"""What the turn runner keeps of a chat it drives, and the sink of a turn nobody watches stream."""

from __future__ import annotations

import asyncio
from datetime import datetime

from bot.runtime.leases import Hold
from bot.runtime.queue import Incoming
from bot.runtime.stops import Running


class ChatState:
    """A chat this process drives: its hold, its running turn, and a signal that a message came in here."""

    def __init__(self, hold: Hold) -> None:
        self.hold = hold
        self.lost = False  # another process took the chat over: stop here without a word
        self.running: Running | None = None
        self.arrived = asyncio.Event()
        # (inbox id, arrival) of messages a turn already took: a turn that could not even store them does
        # not loop on them (SQLite reuses a deleted row's id, hence the arrival time).
        self.tried: set[tuple[int, datetime]] = set()
        self.folded: list[Incoming] = []  # messages of turns folded into the next one (`TurnRunner._watch`)


class QuietSink:
    """The sink of a turn nobody watches stream (a scheduled task's): its answer is delivered whole."""

    async def text(self, partial: str) -> None:
        return None

    async def status(self, line: str) -> None:
        return None
