"""This process as one replica among others on one database: its heartbeat, the chats and jobs it holds,
the /stop requests other processes pass it, and the chats nobody drives.

One process (SQLite, the default) runs the same code: it holds every lease and the loop below only finds the
messages a restart left waiting. Several processes (webhook mode behind a load balancer, PostgreSQL) share
the work: each Telegram update is handled once (db/runtime/store.py records update ids), a chat is driven by
one process at a time (its lease, bot/runtime/leases.py), a periodic job runs in one process at a time, and
when a process dies its chats and jobs move to a live one once its heartbeat is `lease` old.

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
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import suppress
from dataclasses import dataclass
from functools import wraps
from pathlib import Path
from typing import Any, TypeVar

from bot.runtime.leases import LINGER_S, ChatLeases
from core_tools.aio import wait_event
from db.runtime import RuntimeStore

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


def _no_chat(chat_id: int) -> None:
    return None


def _no_turn(chat_id: int, turn: int) -> None:
    return None


@dataclass(frozen=True)
class ReplicaEvents:
    """What the replica tells the front end that drives chats (bot/process/fronts.py gives it closures over
    the turn runner, built after the replica), and asks it how busy it is. Without a front end that drives
    chats (the terminal, the MCP server), nothing is driven from here."""

    on_orphan: Callable[[int], None] = _no_chat  # drive a chat nobody drives
    on_stop: Callable[[int, int], None] = _no_turn  # stop a turn here (a /stop sent to another process)
    on_lost: Callable[[int], None] = _no_chat  # a chat this process found taken over: stop without a word
    running_turns: Callable[[], int] = lambda: 0
    free_chats: Callable[[], int] = lambda: 1000


class Replica:
    """This process as a replica: its heartbeat, its job leases, and the loop that passes it stops, lets
    its lingering chat leases go and finds chats nobody drives."""

    def __init__(self, store: RuntimeStore, lease_s: float, events: ReplicaEvents | None = None) -> None:
        self.store = store
        self.lease_s = lease_s
        self.events = events or ReplicaEvents()
        self.id = f"{socket.gethostname()[:40]}-{uuid.uuid4().hex[:12]}"
        self.chats = ChatLeases(store, self.id, self.kick, settle=self.settle, on_lost=self.events.on_lost)
        self._jobs: set[str] = set()
        self._kicked = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.joined = False
        # The heartbeat thread and what it tells the event loop (plain values: written there, read here).
        self._beats: RuntimeStore | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._fresh_until = 0.0  # monotonic: until then no other process can take this one for dead
        self._lapses = 0  # silences past the lease (counted before the heartbeat that ends them)
        self._checked = 0  # lapses after which this process's chats were checked against the database
        # For the watchdog (bot/runtime/vigil/): when the heartbeat last succeeded (monotonic), why the last
        # attempt failed ("" after a success).
        self.renewed_at = time.monotonic()
        self.beat_error = ""

    def join(self) -> None:
        """Register and start the heartbeat; a process of this pid namespace that provably ended (a previous
        run) is forgotten at once."""
        space = pid_space()
        if space is not None:
            gone = [r.id for r in self.store.on_host(space) if provably_gone(r.pid, r.pid_start)]
            if gone:
                log.info("taking over from %d ended process(es) of this host", len(gone))
                self.store.forget(gone)
        began = time.monotonic()
        self._register()
        self._fresh_until = began + self.lease_s * FRESH_SHARE
        self.renewed_at = began
        self.joined = True
        self._beats = self.store.with_own_connection()
        self._stopping.clear()
        self._thread = threading.Thread(target=self._heartbeat, name="replica-heartbeat", daemon=True)
        self._thread.start()

    def _register(self, store: RuntimeStore | None = None) -> None:
        pid = os.getpid()
        space = pid_space() or f"?/{socket.gethostname()}"
        (store or self.store).join(self.id, space, pid, pid_start(pid) or "")

    def start(self) -> None:
        """Start the loop (in the running event loop); from now on a chat's lease lingers after its turns."""
        if self._task is None:
            self.chats.linger_s = LINGER_S
            self._task = asyncio.create_task(self._loop(), name="replica")

    def kick(self) -> None:
        """Look for chats nobody drives now (a chat was given back, a slot came free)."""
        self._kicked.set()

    async def leave(self) -> None:
        """Stop the loop and the heartbeat and let everything this process held go (a clean stop: no
        waiting for the lease)."""
        if self._task is not None:
            self.chats.linger_s = 0.0
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._thread is not None:
            self._stopping.set()
            await asyncio.to_thread(self._thread.join, 30)
            self._thread = None
        if self._beats is not None and self._beats is not self.store:
            self._beats.close()
        self._beats = None
        if self.joined:
            self.joined = False
            try:
                self.store.forget([self.id])
            except Exception:  # the database is gone: the lease runs out instead
                log.warning(
                    "could not sign off from the database; other processes take over in %ss", self.lease_s
                )

    def alive(self, replica_id: str) -> bool:
        """Whether another process (by id) is alive."""
        return replica_id == self.id or self.store.alive(replica_id)

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
        beats = self._beats or self.store
        try:
            if not beats.beat(self.id):
                log.error("this process had been taken for dead (no heartbeat for %ss)", self.lease_s)
                self._register(beats)
                if began < self._fresh_until:
                    self._lapses += 1  # forgotten while it thought itself alive: check all the same
        except Exception as exc:  # the database is briefly unreachable: try again soon
            log.exception("heartbeat")
            self.beat_error = type(exc).__name__
            return False
        self._fresh_until = began + self.lease_s * FRESH_SHARE
        self.renewed_at, self.beat_error = began, ""
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
        still = self.store.chats_of(self.id)
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
        held = self.store.claim_job(name, self.id)
        fresh = held and name not in self._jobs
        if held:
            self._jobs.add(name)
        else:
            self._jobs.discard(name)
        return held, fresh

    def holding(self, name: str) -> bool:
        """Whether this process held job `name` at its last claim (no database call)."""
        return name in self._jobs

    def exclusive(
        self, name: str, job: Callable[..., Awaitable[T]]
    ) -> Callable[..., Coroutine[Any, Any, T | None]]:
        """A job callback that runs only in the process holding job `name` (one at a time across all)."""

        @wraps(job)
        async def run(*args: Any, **kwargs: Any) -> T | None:
            if not self.holds_job(name)[0]:
                return None
            return await job(*args, **kwargs)

        return run

    def prune(self) -> None:
        """Forget processes dead long ago and update ids past Telegram's retry window."""
        gone, seen = self.store.prune()
        if gone or seen:
            log.info("pruned %d dead process(es) and %d old update id(s)", gone, seen)

    # ------------------------------------------------------------------ the loop

    def _lingering(self) -> None:
        """Drive the lingering chats another process stored a message for (it found them held here), and let
        go of those idle for LINGER_S (kept while a message waits: then driven, unless no slot is free)."""
        if not self.chats.lingering():
            return
        for chat_id in self.store.waiting_for(self.id) & set(self.chats.lingering()):
            self.events.on_orphan(chat_id)
        for chat_id in self.chats.idle_past(self.chats.linger_s):
            if not self.chats.let_go(chat_id, only_if_idle=self.events.free_chats() > 0):
                self.events.on_orphan(chat_id)

    async def _loop(self) -> None:
        loop = asyncio.get_running_loop()
        next_sweep = loop.time()
        while True:
            try:
                now = loop.time()
                self.check_chats()
                if self.events.running_turns():
                    for chat_id, turn in self.store.stops_for(self.id):
                        self.events.on_stop(chat_id, turn)
                self._lingering()
                if now >= next_sweep or self._kicked.is_set():
                    self._kicked.clear()
                    for chat_id in self.store.orphans(self.events.free_chats()):
                        self.events.on_orphan(chat_id)
                    next_sweep = now + SWEEP_S
            except asyncio.CancelledError:
                raise
            except Exception:  # the database is briefly unreachable: try again on the next round
                log.exception("replica loop")
            await wait_event(self._kicked, STOP_POLL_S)
