"""This process among others on one database: its heartbeat, the chats and jobs it holds, the /stop requests
other processes pass it, and the chats nobody drives.

One process (SQLite, the default) runs the same code: it holds every lease and the loop below only finds the
messages a restart left waiting. Several processes (webhook mode behind a load balancer, PostgreSQL) share
the work: each Telegram update is handled once (db/replicas.py records update ids), a chat is driven by one
process at a time (its lease), a periodic job runs in one process at a time, and when a process dies its
chats and jobs move to a live one once its heartbeat is `lease` old.

Liveness is the heartbeat, written by a thread of its own on a connection of its own, so a busy or blocked
event loop does not make a live process look dead. A process is never taken over while its heartbeat is
fresh, with one exception that is provably safe: a process starting in the same pid namespace of the same
boot as a registered one (a restart on the same host or in the same container) takes over at once when that
one's pid is gone or belongs to a process that started at another time. Processes on other machines, in
other containers or pid namespaces (whose pids cannot be looked up from here) are judged by their heartbeat.

A process that was silent for longer than the lease (frozen, starved of CPU, cut off from the database) may
have been taken for dead and its chats taken over. Until its heartbeat is renewed and its chats are checked
against the database, nothing of a turn is sent or stored (`ChatLeases.confirm`); a chat found taken stops
its turn here without a word (the new holder told the user), and the process goes on serving.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

from core_tools.aio import wait_event
from db.replicas import Cluster

log = logging.getLogger(__name__)

STOP_POLL_S = 0.25  # how often a process running turns looks for /stop requests sent to another one
SWEEP_S = 1.0  # how often it looks for chats nobody drives
# The share of the lease this process counts on after a heartbeat: others judge it by the database's clock,
# this process by its own monotonic clock, and the two may run a little apart.
FRESH_SHARE = 0.9
BEAT_RETRY_S = 1.0  # after a heartbeat that failed (the database briefly unreachable)

T = TypeVar("T")


def pid_start(pid: int) -> str | None:
    """When a process started (clock ticks since boot, from /proc): None when no such process runs here,
    "" where /proc is not available (then a live pid is taken as the same process)."""
    stat = Path(f"/proc/{pid}/stat")
    try:
        text = stat.read_text()
    except FileNotFoundError:
        return None
    except OSError:
        text = ""
    if not text:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return ""
    return text.rsplit(")", 1)[1].split()[19]  # field 22 (starttime), counted after the command name


def pid_space() -> str | None:
    """Where this process's pids mean something: this boot of this machine and this pid namespace (with the
    hostname, for people reading the table). None when that cannot be proven: no /proc, or a /proc that
    belongs to another pid namespace (then a pid looked up in it would be another process)."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        namespace = os.readlink("/proc/self/ns/pid")  # "pid:[4026531836]": unique while it exists
        proc_pid = os.readlink("/proc/self")
    except OSError:
        return None
    if not boot or proc_pid != str(os.getpid()):
        return None
    return f"{boot}/{namespace}/{socket.gethostname()}"[:255]


def provably_gone(pid: int, started: str) -> bool:
    """Whether the process registered as (`pid`, `started`) in this pid namespace has ended: its pid is gone,
    or is another process (another start time)."""
    now = pid_start(pid)
    if now is None:
        return True
    return bool(now and started and now != started)


@dataclass(frozen=True)
class Hold:
    """This process's hold on a chat: `claim` names the database lease it shares (a chat taken over and
    taken again is another claim); `new` when this hold took it from the database."""

    chat_id: int
    claim: int
    new: bool


class ChatLeases:
    """The chats this process holds, counted: the driver of a chat and anything else holding it here (a
    /newsession, a scheduled task's turn) share one lease, given back when the last lets go."""

    def __init__(self, cluster: Cluster, me: str, kick: Callable[[], None] = lambda: None) -> None:
        self.cluster = cluster
        self.me = me
        self.kick = kick  # look for chats nobody drives (a chat given back with messages waiting)
        self._held: dict[int, int] = {}
        self._claim: dict[int, int] = {}
        self._claims = itertools.count(1)
        # Set by Replica: wait until this process knows it was not taken for dead (see the module).
        self.settle: Callable[[], Awaitable[None]] = _nothing
        # Called with a chat this process found taken over (by Replica, and by a give_back that finds it).
        self.on_lost: Callable[[int], None] = lambda chat_id: None

    def holds(self, chat_id: int) -> bool:
        """Whether this process holds the chat."""
        return chat_id in self._held

    def held(self) -> list[int]:
        """The chats this process holds."""
        return list(self._held)

    def current(self, hold: Hold) -> bool:
        """Whether `hold` is still this process's hold on its chat (not lost to another process)."""
        return self._claim.get(hold.chat_id) == hold.claim

    def try_take(self, chat_id: int) -> Hold | None:
        """Hold the chat if no live process does (a new hold when taken from the database, a shared one
        when this process already held it); None when another process holds it."""
        if chat_id in self._held:
            self._held[chat_id] += 1
            return Hold(chat_id, self._claim[chat_id], new=False)
        if not self.cluster.claim_chat(chat_id, self.me):
            return None
        self._held[chat_id] = 1
        claim = self._claim[chat_id] = next(self._claims)
        return Hold(chat_id, claim, new=True)

    async def take(self, chat_id: int, poll_s: float = 0.1) -> Hold:
        """Hold the chat, waiting while another process holds it."""
        while (hold := self.try_take(chat_id)) is None:  # noqa: ASYNC110  # the other holder is another process
            await asyncio.sleep(poll_s)
        return hold

    def give_back(self, hold: Hold, *, only_if_idle: bool = False) -> bool:
        """Let go of the chat; the last holder here lets the database lease go (with `only_if_idle`, only
        when no message waits: False then, and the caller goes on driving). A hold on a chat lost meanwhile
        lets nothing go."""
        chat_id = hold.chat_id
        if not self.current(hold):
            return True
        count = self._held[chat_id]
        if count > 1:
            self._held[chat_id] = count - 1
            return True
        released = self.cluster.release_chat(chat_id, self.me, only_if_idle=only_if_idle)
        if released == "waiting":
            return False
        self._forget(chat_id)
        if released == "not held":
            log.warning("chat %s had been taken over by another process", chat_id)
            self.on_lost(chat_id)
        elif not only_if_idle:
            self.kick()  # a message may have come in (to another process) while it was held
        return True

    def lose(self, chat_id: int) -> None:
        """Another process holds the chat now: every hold of it here is void (give_back lets nothing go)."""
        if chat_id in self._held:
            self._forget(chat_id)
            self.on_lost(chat_id)

    def _forget(self, chat_id: int) -> None:
        del self._held[chat_id]
        del self._claim[chat_id]

    async def confirm(self, hold: Hold) -> bool:
        """Whether `hold` still holds its chat, for a turn about to show or keep something: after a silence
        longer than the lease, only once the heartbeat is renewed and the chats are checked."""
        if self.current(hold):
            await self.settle()
        return self.current(hold)


async def _nothing() -> None:
    return None


class Replica:
    """This process's membership: heartbeat, job leases, the loop that passes stops and finds orphans."""

    def __init__(self, cluster: Cluster, lease_s: float) -> None:
        self.cluster = cluster
        self.lease_s = lease_s
        self.id = f"{socket.gethostname()[:40]}-{uuid.uuid4().hex[:12]}"
        self.chats = ChatLeases(cluster, self.id, self.kick)
        self.chats.settle = self.settle
        # Set by the application (bot/app.py): drive a chat nobody drives, stop a turn, how busy this is.
        self.on_orphan: Callable[[int], None] = lambda chat_id: None
        self.on_stop: Callable[[int, int], None] = lambda chat_id, turn: None
        self.running_turns: Callable[[], int] = lambda: 0
        self.free_chats: Callable[[], int] = lambda: 1000
        self._jobs: set[str] = set()
        self._kicked = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.joined = False
        # The heartbeat thread and what it tells the event loop (plain values: written there, read here).
        self._beats: Cluster | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._fresh_until = 0.0  # monotonic: until then no other process can take this one for dead
        self._lapses = 0  # silences past the lease (counted before the heartbeat that ends them)
        self._checked = 0  # lapses after which this process's chats were checked against the database

    def join(self) -> None:
        """Register and start the heartbeat; a process of this pid namespace that provably ended (a previous
        run) is forgotten at once."""
        space = pid_space()
        if space is not None:
            gone = [r.id for r in self.cluster.on_host(space) if provably_gone(r.pid, r.pid_start)]
            if gone:
                log.info("taking over from %d ended process(es) of this host", len(gone))
                self.cluster.forget(gone)
        began = time.monotonic()
        self._register()
        self._fresh_until = began + self.lease_s * FRESH_SHARE
        self.joined = True
        self._beats = self.cluster.with_own_connection()
        self._stopping.clear()
        self._thread = threading.Thread(target=self._heartbeat, name="replica-heartbeat", daemon=True)
        self._thread.start()

    def _register(self, cluster: Cluster | None = None) -> None:
        pid = os.getpid()
        space = pid_space() or f"?/{socket.gethostname()}"
        (cluster or self.cluster).join(self.id, space, pid, pid_start(pid) or "")

    def start(self) -> None:
        """Start the loop (in the running event loop)."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="replica")

    def kick(self) -> None:
        """Look for chats nobody drives now (a chat was given back, a slot came free)."""
        self._kicked.set()

    async def leave(self) -> None:
        """Stop the loop and the heartbeat and let everything this process held go (a clean stop: no
        waiting for the lease)."""
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._thread is not None:
            self._stopping.set()
            await asyncio.to_thread(self._thread.join, 30)
            self._thread = None
        if self._beats is not None and self._beats is not self.cluster:
            self._beats.close()
        self._beats = None
        if self.joined:
            self.joined = False
            try:
                self.cluster.forget([self.id])
            except Exception:  # the database is gone: the lease runs out instead
                log.warning(
                    "could not sign off from the database; other processes take over in %ss", self.lease_s
                )

    def alive(self, replica_id: str) -> bool:
        """Whether another process (by id) is alive."""
        return replica_id == self.id or self.cluster.alive(replica_id)

    # ------------------------------------------------------------------ the heartbeat (its own thread)

    def _heartbeat(self) -> None:
        every = max(0.2, self.lease_s / 3)
        wait = every
        while not self._stopping.wait(wait):
            wait = every if self.beat() else BEAT_RETRY_S

    def beat(self) -> bool:
        """Renew the heartbeat (the heartbeat thread's work); False when the database could not be reached."""
        began = time.monotonic()
        if began >= self._fresh_until:
            # Silent past the lease: another process may have taken this one's chats. Counted before the
            # heartbeat renews it, so whoever sees it fresh again also sees that its chats need a check.
            self._lapses += 1
            log.warning(
                "no heartbeat for over %ss: checking which chats are still this process's", self.lease_s
            )
        beats = self._beats or self.cluster
        try:
            if not beats.beat(self.id):
                log.error("this process had been taken for dead (no heartbeat for %ss)", self.lease_s)
                self._register(beats)
                if began < self._fresh_until:
                    self._lapses += 1  # forgotten while it thought itself alive: check all the same
        except Exception:  # the database is briefly unreachable: try again soon
            log.exception("heartbeat")
            return False
        self._fresh_until = began + self.lease_s * FRESH_SHARE
        return True

    def fresh(self) -> bool:
        """Whether no other process can have taken this one for dead since its last heartbeat."""
        return time.monotonic() < self._fresh_until

    async def settle(self) -> None:
        """Wait until the heartbeat is fresh (the thread renews it; at most a lease, then go on: the
        database is unreachable) and let go of chats taken over meanwhile."""
        if not self.joined or (self.fresh() and self._lapses == self._checked):
            return  # (not joined: no heartbeat, nothing another process could have taken)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.lease_s
        while not self.fresh() and loop.time() < deadline:  # noqa: ASYNC110  # renewed by another thread
            await asyncio.sleep(0.05)
        with suppress(Exception):  # the database is unreachable: the next look checks again
            self.check_chats()

    def check_chats(self) -> None:
        """After a silence past the lease, once the heartbeat is fresh again: the chats another process took
        meanwhile are lost here (their turns stop without a word)."""
        lapses = self._lapses  # read before `fresh`: a fresh heartbeat then came after these lapses
        if lapses == self._checked or not self.fresh():
            return
        still = self.cluster.chats_of(self.id)
        for chat_id in self.chats.held():
            if chat_id not in still:
                log.warning(
                    "chat %s was taken over while this process was silent; its turn here stops", chat_id
                )
                self.chats.lose(chat_id)
        self._checked = lapses

    # ------------------------------------------------------------------ jobs

    def holds_job(self, name: str) -> tuple[bool, bool]:
        """(this process runs job `name` now, it has just taken it over)."""
        held = self.cluster.claim_job(name, self.id)
        fresh = held and name not in self._jobs
        if held:
            self._jobs.add(name)
        else:
            self._jobs.discard(name)
        return held, fresh

    def exclusive(self, name: str, job: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T | None]]:
        """A job callback that runs only in the process holding job `name` (one at a time across all)."""

        @wraps(job)
        async def run(*args: Any, **kwargs: Any) -> T | None:
            if not self.holds_job(name)[0]:
                return None
            return await job(*args, **kwargs)

        return run

    def prune(self) -> None:
        """Forget processes dead long ago and update ids past Telegram's retry window."""
        gone, seen = self.cluster.prune()
        if gone or seen:
            log.info("pruned %d dead process(es) and %d old update id(s)", gone, seen)

    # ------------------------------------------------------------------ the loop

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_sweep = loop.time()
        while True:
            try:
                now = loop.time()
                self.check_chats()
                if self.running_turns():
                    for chat_id, turn in self.cluster.stops_for(self.id):
                        self.on_stop(chat_id, turn)
                if now >= next_sweep or self._kicked.is_set():
                    self._kicked.clear()
                    for chat_id in self.cluster.orphans(self.free_chats()):
                        self.on_orphan(chat_id)
                    next_sweep = now + SWEEP_S
            except asyncio.CancelledError:
                raise
            except Exception:  # the database is briefly unreachable: try again on the next round
                log.exception("replica loop")
            await wait_event(self._kicked, STOP_POLL_S)


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
