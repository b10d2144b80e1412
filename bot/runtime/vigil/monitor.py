"""The watchdog's loop: every WATCHDOG_TICK_S it looks at each condition (cheaply: the process's own state,
one small query, a ping now and then; never the model), and at a condition's onset logs it once with its
cause, records it (watchdog_events, which `python -m bot doctor` counts) and alerts the second channel
(ALERT_WEBHOOK_URL); when it clears, logs and records that and tells the owner what happened. After every
tick it rewrites the health file (HEALTH_FILE) with `ok` or `unhealthy: <reason>`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bot.runtime.vigil.alert import AlertWebhook
from bot.runtime.vigil.conditions import Change, Reading, Tracker
from bot.runtime.vigil.health import write_health
from db.watchdog_events import WatchdogEvents

log = logging.getLogger(__name__)

Probe = Callable[[float], Awaitable[Reading | None]]


@dataclass(frozen=True)
class Episode:
    """A condition from its onset to its end (wall-clock timestamps), with its last cause."""

    name: str
    started: float
    ended: float
    cause: str


def hhmm(t: float) -> str:
    """A wall-clock timestamp as the owner reads it (the process's time zone)."""
    return datetime.fromtimestamp(t).astimezone().strftime("%H:%M")


def default_notice(e: Episode) -> str:
    return f"Watchdog: {e.name} from {hhmm(e.started)} to {hhmm(e.ended)} ({e.cause}); it is over now."


@dataclass
class Condition:
    """A condition the watchdog watches: `probe(now)` reads it (None: all is well)."""

    name: str  # as the log, the doctor and the owner read it: "polling stalled"
    probe: Probe
    after_s: float = 0.0  # a reading must be wrong this long before the condition begins
    every_s: float = 0.0  # probe this often (0: at every tick); the last reading stands in between
    # False: another part logs it and tells the owner (the long poll's watchdog); it is still recorded,
    # alerted and in the health file.
    announce: bool = True
    notice: Callable[[Episode], str] = default_notice  # what the owner is told once it cleared
    # Called once at each onset (a healing step of its own: none by default).
    on_begin: Callable[[], Awaitable[None]] | None = None


class Vigil:
    """Watches the conditions added to it; `tick` once, or `start` the loop."""

    def __init__(
        self,
        *,
        tick_s: float,
        process: str,
        events: WatchdogEvents | None = None,
        health_file: Path | None = None,
        tell: Callable[[str], Awaitable[None]] | None = None,
        alert: AlertWebhook | None = None,
        label: str = "assistant",
        secrets: Sequence[str] = (),
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.tick_s = tick_s
        self.process = process  # the replica id: which process an event is of
        self.events = events
        self.health_file = health_file
        self.tell = tell  # the owner, in the front end (raises when it cannot)
        self.alert = alert
        self.label = label
        self._secrets = [s for s in secrets if s]
        self.clock = clock
        self.wall = wall
        self._watched: list[tuple[Condition, Tracker]] = []
        self._due: dict[str, float] = {}
        self._last: dict[str, Reading | None] = {}
        self._event_ids: dict[str, int] = {}
        self.notices: list[str] = []  # told once the front end takes them (retried at each tick)
        self.told = 0
        self.ticks = 0
        self._health_failed = False
        self._probe_failing: set[str] = set()
        self._task: asyncio.Task[None] | None = None

    def add(self, condition: Condition) -> None:
        """Watch `condition` from the next tick on."""
        self._watched.append((condition, Tracker(condition.name, condition.after_s)))

    def tracker(self, name: str) -> Tracker:
        """The state of the condition `name` (tests, the health line)."""
        return next(t for c, t in self._watched if c.name == name)

    def _mask(self, text: str) -> str:
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def _wall_of(self, mono: float) -> float:
        return self.wall() - (self.clock() - mono)

    # ------------------------------------------------------------------ one look

    async def tick(self) -> dict[str, Change]:
        """Look at every condition once, act on what changed, tell what waits, rewrite the health file."""
        now = self.clock()
        changes: dict[str, Change] = {}
        for condition, tracker in self._watched:
            reading = await self._read(condition, now)
            change = tracker.observe(now, reading)
            changes[condition.name] = change
            if change is Change.BEGAN:
                await self._began(condition, tracker)
            elif change is Change.ENDED:
                await self._ended(condition, tracker)
        await self._tell_waiting()
        self.ticks += 1
        self._write_health()
        return changes

    async def _read(self, condition: Condition, now: float) -> Reading | None:
        name = condition.name
        if name in self._last and now < self._due.get(name, 0.0):
            return self._last[name]
        self._due[name] = now + condition.every_s
        try:
            reading = await condition.probe(now)
        except Exception as exc:  # a probe that fails says nothing: the last reading stands
            if name not in self._probe_failing:  # logged once a streak
                self._probe_failing.add(name)
                log.warning(
                    "watchdog: could not look at %s: %s", name, self._mask(f"{type(exc).__name__}: {exc}")
                )
            return self._last.get(name)
        self._probe_failing.discard(name)
        self._last[name] = reading
        return reading

    async def _began(self, condition: Condition, tracker: Tracker) -> None:
        started = self._wall_of(tracker.since)
        cause = self._mask(tracker.cause)
        if condition.announce:
            log.warning("watchdog: %s since %s: %s", condition.name, hhmm(started), cause)
        if self.events is not None:
            when = datetime.fromtimestamp(started, UTC)
            try:
                self._event_ids[condition.name] = await asyncio.to_thread(
                    self.events.begin, condition.name, self.process, when, cause
                )
            except Exception as exc:  # the database may be the trouble: the log has it
                log.warning("watchdog: could not record %s: %s", condition.name, type(exc).__name__)
        if self.alert is not None:
            self.alert.send(f"{self.label}: {condition.name} since {hhmm(started)}: {cause}")
        if condition.on_begin is not None:
            try:
                await condition.on_begin()
            except Exception:
                log.exception("watchdog: healing %s failed", condition.name)

    async def _ended(self, condition: Condition, tracker: Tracker) -> None:
        episode = Episode(
            condition.name,
            self._wall_of(tracker.since),
            self._wall_of(tracker.ended_at),
            self._mask(tracker.cause),
        )
        if condition.announce:
            log.info(
                "watchdog: %s is over (%s to %s)", condition.name, hhmm(episode.started), hhmm(episode.ended)
            )
        event_id = self._event_ids.pop(condition.name, None)
        if self.events is not None and event_id is not None:
            when = datetime.fromtimestamp(episode.ended, UTC)
            try:
                await asyncio.to_thread(self.events.end, event_id, when)
            except Exception as exc:
                log.warning(
                    "watchdog: could not record the end of %s: %s", condition.name, type(exc).__name__
                )
        if condition.announce and self.tell is not None:
            self.notices.append(self._mask(condition.notice(episode)))

    async def _tell_waiting(self) -> None:
        while self.notices and self.tell is not None:
            try:
                await self.tell(self.notices[0])
            except Exception as exc:  # Telegram may still be the trouble: the next tick tries again
                log.info("watchdog: could not tell the owner yet: %s", type(exc).__name__)
                return
            self.notices.pop(0)
            self.told += 1

    # ------------------------------------------------------------------ the health file

    def status(self) -> str:
        """`ok`, or `unhealthy: <what since when (why)>; ...`."""
        active = [t for _c, t in self._watched if t.active]
        if not active:
            return "ok"
        parts = [f"{t.name} since {hhmm(self._wall_of(t.since))} ({self._mask(t.cause)})" for t in active]
        return "unhealthy: " + "; ".join(parts)

    def _write_health(self) -> None:
        if self.health_file is None:
            return
        stamp = datetime.fromtimestamp(self.wall(), UTC).isoformat(timespec="seconds")
        try:
            write_health(
                self.health_file,
                [self.status(), f"process {self.process}, tick {self.ticks}, {stamp}", f"pid {os.getpid()}"],
            )
            self._health_failed = False
        except OSError as exc:
            if not self._health_failed:  # once, not at every tick
                log.warning("watchdog: could not write the health file %s: %s", self.health_file, exc)
            self._health_failed = True

    # ------------------------------------------------------------------ the loop

    def start(self) -> None:
        """Tick every `tick_s` from now on (in the running event loop)."""
        if self._task is None and self.tick_s > 0:
            self._task = asyncio.create_task(self._run(), name="watchdog")

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("watchdog tick")
            await asyncio.sleep(self.tick_s)

    async def aclose(self) -> None:
        """Stop ticking; the alerts under way finish (bounded by their timeout)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self.alert is not None:
            await self.alert.drain()
        if self.health_file is not None and self.ticks:
            with contextlib.suppress(OSError):
                write_health(
                    self.health_file,
                    ["unhealthy: the bot stopped", f"process {self.process}", f"pid {os.getpid()}"],
                )
