"""This process among others on one database: its heartbeat, the chats and jobs it holds, the /stop requests
other processes pass it, and the chats nobody drives.

One process (SQLite, the default) runs the same code: it holds every lease and the loop below only finds the
messages a restart left waiting. Several processes (webhook mode behind a load balancer, PostgreSQL) share
the work: each Telegram update is handled once (db/replicas.py records update ids), a chat is driven by one
process at a time (its lease), a periodic job runs in one process at a time, and when a process dies its
chats and jobs move to a live one once its heartbeat is `lease` old. A process that starts on the same host
as a dead one (a restart) takes over at once: it can tell the old pid is gone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, suppress
from datetime import timedelta
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

from db.models import utcnow
from db.replicas import Cluster

log = logging.getLogger(__name__)

STOP_POLL_S = 0.25  # how often a process running turns looks for /stop requests sent to another one
SWEEP_S = 1.0  # how often it looks for chats nobody drives
KEEP_UPDATES = timedelta(days=2)  # Telegram retries a delivery for at most a day

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


def host_id() -> str:
    """This host (and boot): pids are only comparable between processes with the same one."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"[:255]


class ChatLeases:
    """The chats this process holds, counted: the driver of a chat and anything else holding it here (a
    /newsession, a scheduled task's turn) share one lease, given back when the last lets go."""

    def __init__(self, cluster: Cluster, me: str, kick: Callable[[], None] = lambda: None) -> None:
        self.cluster = cluster
        self.me = me
        self.kick = kick  # look for chats nobody drives (a chat given back with messages waiting)
        self._held: dict[int, int] = {}

    def holds(self, chat_id: int) -> bool:
        """Whether this process holds the chat."""
        return chat_id in self._held

    def try_take(self, chat_id: int) -> bool | None:
        """Hold the chat if no live process does: True when newly taken from the database, False when
        this process already held it (one more holder), None when another process holds it."""
        if chat_id in self._held:
            self._held[chat_id] += 1
            return False
        if not self.cluster.claim_chat(chat_id, self.me):
            return None
        self._held[chat_id] = 1
        return True

    async def take(self, chat_id: int, poll_s: float = 0.1) -> None:
        """Hold the chat, waiting while another process holds it."""
        while self.try_take(chat_id) is None:  # noqa: ASYNC110  # the other holder is another process
            await asyncio.sleep(poll_s)

    def give_back(self, chat_id: int, *, only_if_idle: bool = False) -> bool:
        """Let go of the chat; the last holder here lets the database lease go (with `only_if_idle`, only
        when no message waits: False then, and the caller goes on driving)."""
        count = self._held.get(chat_id, 0)
        if count > 1:
            self._held[chat_id] = count - 1
            return True
        if count == 1:
            released = self.cluster.release_chat(chat_id, self.me, only_if_idle=only_if_idle)
            if not released and only_if_idle:
                return False
            del self._held[chat_id]
            if not only_if_idle:
                self.kick()  # a message may have come in (to another process) while it was held
        return True


class Replica:
    """This process's membership: heartbeat, job leases, the loop that passes stops and finds orphans."""

    def __init__(self, cluster: Cluster, lease_s: float) -> None:
        self.cluster = cluster
        self.lease_s = lease_s
        self.id = f"{socket.gethostname()[:40]}-{uuid.uuid4().hex[:12]}"
        self.chats = ChatLeases(cluster, self.id, self.kick)
        # Set by the application (bot/app.py): drive a chat nobody drives, stop a turn, how busy this is.
        self.on_orphan: Callable[[int], None] = lambda chat_id: None
        self.on_stop: Callable[[int, int], None] = lambda chat_id, turn: None
        self.running_turns: Callable[[], int] = lambda: 0
        self.free_chats: Callable[[], int] = lambda: 1000
        self._jobs: set[str] = set()
        self._kicked = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.joined = False

    def join(self) -> None:
        """Register; processes of this host that are gone (a previous run) are forgotten at once."""
        host = host_id()
        gone = [r.id for r in self.cluster.on_host(host) if pid_start(r.pid) != r.pid_start]
        if gone:
            log.info("taking over from %d process(es) of this host that ended", len(gone))
            self.cluster.forget(gone)
        self._register(host)
        self.joined = True

    def _register(self, host: str) -> None:
        pid = os.getpid()
        self.cluster.join(self.id, host, pid, pid_start(pid) or "")

    def start(self) -> None:
        """Start the loop (in the running event loop)."""
        if self._task is None:
            self._task = asyncio.create_task(self._loop(), name="replica")

    def kick(self) -> None:
        """Look for chats nobody drives now (a chat was given back, a slot came free)."""
        self._kicked.set()

    async def leave(self) -> None:
        """Stop the loop and let everything this process held go (a clean stop: no waiting for the lease)."""
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None
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
        gone, seen = self.cluster.prune(utcnow() - KEEP_UPDATES)
        if gone or seen:
            log.info("pruned %d dead process(es) and %d old update id(s)", gone, seen)

    # ------------------------------------------------------------------ the loop

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        beat_every = max(0.5, self.lease_s / 3)
        next_beat = next_sweep = loop.time()
        while True:
            try:
                now = loop.time()
                if now >= next_beat:
                    if not self.cluster.beat(self.id):
                        log.error("this process had been taken for dead (no heartbeat for %ss)", self.lease_s)
                        self._register(host_id())
                    next_beat = now + beat_every
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
            with suppress(TimeoutError):
                await asyncio.wait_for(self._kicked.wait(), STOP_POLL_S)


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
                await self.chats.take(chat_id)
                try:
                    yield
                finally:
                    self.chats.give_back(chat_id)
        finally:
            self._users[chat_id] -= 1
            if self._users[chat_id] == 0:  # forget idle chats so the map does not grow forever
                del self._users[chat_id]
                self._locks.pop(chat_id, None)
