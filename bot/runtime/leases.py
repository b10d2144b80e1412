"""The chats this process holds: a chat's lease (db/runtime/store.py) is held by one live process at a time,
shared here by everything that holds the chat (its driver, a /newsession, a scheduled task's turn).

When the last holder here lets go, the lease is kept a while (`linger_s`, set once the replica loop runs):
a chat's next message, most often soon, then costs no claim, no release and no look for turns a dead
process left. Messages another process stores for a chat that lingers here are found by the replica loop
(bot/runtime/replica.py), which also lets the lease go once the chat was idle for `linger_s`.

A process that was silent for longer than the replica lease (frozen, starved of CPU, cut off from the
database) may have been taken for dead and its chats taken over: `confirm` answers, for a turn about to show
or keep something, whether its hold is still this process's.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass

from db.runtime import Claimed, PendingMessage, RuntimeStore

log = logging.getLogger(__name__)

LINGER_S = 10.0  # how long a chat's lease stays with this process after its last turn here


@dataclass(frozen=True)
class Hold:
    """This process's hold on a chat: `claim` names the database lease it shares (a chat taken over and
    taken again is another claim); `new` when this hold took it from the database, with the messages whose
    turn a dead process could not finish (`interrupted`: the chat is told)."""

    chat_id: int
    claim: int
    new: bool
    interrupted: tuple[PendingMessage, ...] = ()


async def _nothing() -> None:
    return None


class ChatLeases:
    """The chats this process holds, counted: the driver of a chat and anything else holding it here (a
    /newsession, a scheduled task's turn) share one lease, kept a while after the last lets go."""

    def __init__(
        self,
        store: RuntimeStore,
        me: str,
        kick: Callable[[], None] = lambda: None,
        *,
        settle: Callable[[], Awaitable[None]] = _nothing,
        on_lost: Callable[[int], None] = lambda chat_id: None,
    ) -> None:
        self.store = store
        self.me = me
        self.kick = kick  # look for chats nobody drives (a chat given back with messages waiting)
        # Set by Replica once its loop runs (it lets lingering leases go); 0: given back at once.
        self.linger_s = 0.0
        self._held: dict[int, int] = {}  # chat -> holders here (0: nobody, the lease lingers)
        self._claim: dict[int, int] = {}
        self._idle_since: dict[int, float] = {}  # lingering chats: when the last holder let go (monotonic)
        self._claims = itertools.count(1)
        # Wait until this process knows it was not taken for dead (the replica's, see the module).
        self.settle = settle
        # Called with a chat this process found taken over (by Replica, and by a give_back that finds it).
        self.on_lost = on_lost

    def holds(self, chat_id: int) -> bool:
        """Whether this process holds the chat (a lingering lease too)."""
        return chat_id in self._held

    def held(self) -> list[int]:
        """The chats this process holds."""
        return list(self._held)

    def lingering(self) -> list[int]:
        """The chats whose lease this process keeps with nobody holding them here."""
        return list(self._idle_since)

    def current(self, hold: Hold) -> bool:
        """Whether `hold` is still this process's hold on its chat (not lost to another process)."""
        return self._claim.get(hold.chat_id) == hold.claim

    def try_take(self, chat_id: int) -> Hold | None:
        """Hold the chat if no live process does (a new hold when taken from the database, a shared one
        when this process already held it); None when another process holds it."""
        if chat_id in self._held:
            self._held[chat_id] += 1
            self._idle_since.pop(chat_id, None)
            return Hold(chat_id, self._claim[chat_id], new=False)
        claimed = self.store.claim_chat(chat_id, self.me)
        return None if claimed is None else self.adopt(claimed)

    def adopt(self, claimed: Claimed) -> Hold:
        """Hold a chat whose claim this process won (here, or in the transaction that stored a message)."""
        chat_id = claimed.chat_id
        self._held[chat_id] = 1
        claim = self._claim[chat_id] = next(self._claims)
        return Hold(chat_id, claim, new=True, interrupted=tuple(claimed.interrupted))

    async def take(self, chat_id: int, poll_s: float = 0.1) -> Hold:
        """Hold the chat, waiting while another process holds it."""
        while (hold := self.try_take(chat_id)) is None:  # noqa: ASYNC110  # the other holder is another process
            await asyncio.sleep(poll_s)
        return hold

    def give_back(self, hold: Hold, *, only_if_idle: bool = False) -> bool:
        """Let go of the chat; after the last holder here the lease lingers (`linger_s`), or is let go in
        the database (with `only_if_idle`, only when no message waits: False then, and the caller goes on
        driving). A hold on a chat lost meanwhile lets nothing go."""
        chat_id = hold.chat_id
        if not self.current(hold):
            return True
        count = self._held[chat_id]
        if count > 1:
            self._held[chat_id] = count - 1
            return True
        if self.linger_s > 0:
            # Kept: messages other processes stored meanwhile are found by the replica loop.
            self._held[chat_id] = 0
            self._idle_since[chat_id] = time.monotonic()
            if not only_if_idle:
                self.kick()
            return True
        released = self.store.release_chat(chat_id, self.me, only_if_idle=only_if_idle)
        if released == "waiting":
            return False
        self._forget(chat_id)
        if released == "not held":
            log.warning("chat %s had been taken over by another process", chat_id)
            self.on_lost(chat_id)
        elif not only_if_idle:
            self.kick()  # a message may have come in (to another process) while it was held
        return True

    def idle_past(self, seconds: float) -> list[int]:
        """Lingering chats nobody here held for `seconds`."""
        now = time.monotonic()
        return [c for c, since in self._idle_since.items() if now - since >= seconds]

    def let_go(self, chat_id: int, *, only_if_idle: bool) -> bool:
        """Let a lingering chat's lease go in the database; False when it is kept instead, because a
        message waits for it (with `only_if_idle`: the caller drives it)."""
        if self._held.get(chat_id) != 0:
            return True  # held again meanwhile
        released = self.store.release_chat(chat_id, self.me, only_if_idle=only_if_idle)
        if released == "waiting":
            self._idle_since[chat_id] = time.monotonic()
            return False
        self._forget(chat_id)
        if released == "not held":
            log.warning("chat %s had been taken over by another process", chat_id)
            self.on_lost(chat_id)
        return True

    def lose(self, chat_id: int) -> None:
        """Another process holds the chat now: every hold of it here is void (give_back lets nothing go)."""
        if chat_id in self._held:
            self._forget(chat_id)
            self.on_lost(chat_id)

    def _forget(self, chat_id: int) -> None:
        del self._held[chat_id]
        del self._claim[chat_id]
        self._idle_since.pop(chat_id, None)

    async def confirm(self, hold: Hold) -> bool:
        """Whether `hold` still holds its chat, for a turn about to show or keep something: after a silence
        longer than the lease, only once the heartbeat is renewed and the chats are checked. Read from
        memory the heartbeat thread keeps fresh: no database round trip while it is."""
        if self.current(hold):
            await self.settle()
        return self.current(hold)


class ChatLocks:
    """One lock per chat across every process: a local lock orders this process's holders (turns, a
    /newsession, a scheduled task's turn), the chat's lease keeps other processes out meanwhile."""

    def __init__(self, chats: ChatLeases) -> None:
        self.chats = chats
        self._locks: defaultdict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._users: defaultdict[int, int] = defaultdict(int)

    @asynccontextmanager
    async def hold(self, chat_id: int) -> AsyncIterator[None]:
        """Wait for the chat's turn."""
        self._users[chat_id] += 1
        try:
            async with self._locks[chat_id]:
                hold = await self.chats.take(chat_id)
                try:
                    yield
                finally:
                    self.chats.give_back(hold)
        finally:
            self._users[chat_id] -= 1
            if self._users[chat_id] == 0:  # forget idle chats so the map does not grow forever
                del self._users[chat_id]
                self._locks.pop(chat_id, None)
