"""The long poll's watchdog (issue 33): notices getUpdates making no progress, restarts the poller, tells.

A long poll completes within its timeout even when no update comes, so an idle bot polls successfully every
few seconds: no successful getUpdates for WATCHDOG_POLL_STALL_S means the poll is stuck (a hung connection
pool, a proxy answering 502) even while other Bot API calls answer. The watchdog then aborts the stuck
request (a fresh aiohttp session, `PollingRequest.reset`), restarts the Updater with the same arguments, and
after WATCHDOG_POLL_RESTARTS restarts without progress stops the application with a non-zero exit code (the
supervisor restarts the process), unless the Bot API does not answer getMe either: a new process would find
the same (and could not start), so it stays and keeps restarting the poller. The condition is logged once
with its cause; once getUpdates answers again the owner is told in Telegram what was missed. `PollHealth`
holds the decisions, on an injected clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from bot.adapter.telegram_http import PollingRequest

if TYPE_CHECKING:
    from bot.adapter.context import App

log = logging.getLogger(__name__)

EXIT_POLL_STALLED = 3  # `python -m bot`'s exit code when restarts did not bring polling back


class Action(enum.Enum):
    NONE = "none"
    RESTART = "restart"
    GIVE_UP = "give up"
    RECOVERED = "recovered"


@dataclass
class PollHealth:
    """The watchdog's decisions from the time of the last successful getUpdates (`last_ok`) and now."""

    stall_s: float
    max_restarts: int
    stalled_since: float | None = None  # the last success before the stall
    restarts: int = 0
    restarted_at: float = 0.0
    recovered_at: float = 0.0

    def observe(self, now: float, last_ok: float) -> Action:
        """What to do now."""
        if self.stalled_since is None:
            if now - last_ok < self.stall_s:
                return Action.NONE
            self.stalled_since = last_ok
            return self._restart(now)
        if last_ok > self.stalled_since:  # a getUpdates succeeded since
            self.recovered_at = last_ok
            return Action.RECOVERED
        if now - self.restarted_at < self.stall_s:
            return Action.NONE
        if self.restarts >= self.max_restarts:
            return Action.GIVE_UP
        return self._restart(now)

    def _restart(self, now: float) -> Action:
        if self.max_restarts == 0:
            return Action.GIVE_UP
        self.restarts += 1
        self.restarted_at = now
        return Action.RESTART

    def keep_trying(self, now: float) -> None:
        """Giving up would not help (the whole Bot API is out of reach): another threshold before the next
        look, without counting a restart."""
        self.restarted_at = now

    def reset(self) -> None:
        """Polling works again: the next stall is a new one."""
        self.stalled_since = None
        self.restarts = 0


def missed_notice(start: float, end: float, count: int) -> str:
    """The owner's notice; `start` and `end` are wall-clock timestamps (the process's time zone)."""

    def hhmm(t: float) -> str:
        return datetime.fromtimestamp(t).astimezone().strftime("%H:%M")

    told = f"I could not receive messages from {hhmm(start)} to {hhmm(end)}; "
    if count == 0:
        return told + "no message arrived meanwhile."
    return told + f"{count} message(s) that arrived meanwhile are answered now."


API_PROBE_S = 10.0  # how long getMe may take before giving up counts the Bot API as out of reach
STALL_MARGIN_S = 1.0  # beyond the long poll's timeout, the least a stall threshold can be
POLL_TIMEOUT_S = 10.0  # start_polling's default timeout


def poll_timeout_s(polling: dict[str, Any]) -> float:
    """The long poll's timeout in seconds of start_polling's arguments."""
    value = polling.get("timeout", POLL_TIMEOUT_S)
    return float(value.total_seconds() if isinstance(value, timedelta) else value)


class PollWatchdog:
    """Watches `request` while `app` polls; restarts its Updater with `polling` (start_polling's args)."""

    def __init__(
        self,
        app: App,
        request: PollingRequest,
        polling: dict[str, Any],
        *,
        stall_s: float,
        max_restarts: int,
        owner_id: int | None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.app = app
        self.request = request
        self.polling = {k: v for k, v in polling.items() if k != "drop_pending_updates"}
        # A long poll with no update takes its whole timeout: a threshold below it would be a false alarm.
        self.health = PollHealth(max(stall_s, poll_timeout_s(polling) + STALL_MARGIN_S), max_restarts)
        self.owner_id = owner_id
        self.wall = wall
        self.gave_up = False
        self.notices = 0
        self._stall_wall = 0.0  # when the stall began, wall clock
        self._unreachable_told = False  # logged once a stall: the whole Bot API is out of reach
        self._restart_failed_told = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Watch from now on (a no-op when off: WATCHDOG_POLL_STALL_S=0)."""
        if self.health.stall_s <= 0 or self._task is not None:
            return
        self.request.last_ok = max(self.request.last_ok, self.request.clock())
        self._task = asyncio.create_task(self._run(), name="poll-watchdog")

    async def aclose(self) -> None:
        """Stop watching."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self) -> None:
        interval = max(0.05, min(self.health.stall_s / 4, 5.0))
        while True:
            await asyncio.sleep(interval)
            await self.check()

    def _wall_of(self, mono: float) -> float:
        return self.wall() - (self.request.clock() - mono)

    async def check(self) -> Action:
        """Look once and act."""
        updater = self.app.updater
        if updater is None or not self.app.running:
            return Action.NONE
        request, health = self.request, self.health
        first = health.stalled_since is None
        action = health.observe(request.clock(), request.last_ok)
        if action is Action.RESTART:
            if first:
                cause = (
                    request.last_failure and f"{request.failures} failed, the last: {request.last_failure}"
                )
                log.warning(
                    "polling makes no progress: no getUpdates succeeded for %.0f s (%s); restarting it",
                    request.clock() - request.last_ok,
                    cause or "none answered",
                )
                request.count_next = True
                self._stall_wall = self._wall_of(request.last_ok)
            await self._restart(updater)
        elif action is Action.GIVE_UP and not await self._api_answers():
            # Nothing of the Bot API answers (the network, or Telegram, is down): a new process would find
            # the same and could not even start. Stay, and try the poller again after another threshold.
            if not self._unreachable_told:
                self._unreachable_told = True
                log.warning(
                    "polling still makes no progress and the Bot API does not answer getMe either: "
                    "staying up and restarting the poller every %.0f s until it answers",
                    health.stall_s,
                )
            health.keep_trying(request.clock())
            await self._restart(updater)
            action = Action.RESTART
        elif action is Action.GIVE_UP:
            log.error(
                "polling still makes no progress after %d restart(s): stopping (exit %d)",
                health.restarts,
                EXIT_POLL_STALLED,
            )
            self.gave_up = True
            self.app.stop_running()
            self._task = None
        elif action is Action.RECOVERED:
            count = request.counted or 0
            request.counted = None
            request.count_next = False
            log.info("polling works again after %d restart(s)", health.restarts)
            health.reset()
            self._unreachable_told = self._restart_failed_told = False
            await self._tell(missed_notice(self._stall_wall, self._wall_of(health.recovered_at), count))
        return action

    async def _restart(self, updater: Any) -> None:
        await self.request.reset()  # aborts the stuck getUpdates
        try:
            if updater.running:
                await updater.stop()
            if self.app.running:
                await updater.start_polling(**self.polling)
        except RuntimeError:  # stopped meanwhile (the application stops)
            pass
        except Exception as exc:  # its deleteWebhook failed (the Bot API out of reach): the next look retries
            if not self._restart_failed_told:
                self._restart_failed_told = True
                log.warning("could not restart the poller (%s): trying again", type(exc).__name__)

    async def _api_answers(self) -> bool:
        """Whether the Bot API answers getMe (through the bot's own requests, not the poll's)."""
        try:
            async with asyncio.timeout(API_PROBE_S):
                await self.app.bot.get_me()
        except Exception:
            return False
        return True

    async def _tell(self, text: str) -> None:
        if self.owner_id is None:
            return
        try:
            await self.app.bot.send_message(self.owner_id, text)
            self.notices += 1
        except Exception as exc:  # the notice is best effort; the log has the condition
            log.warning("could not tell the owner that polling is back: %s", type(exc).__name__)


def poll_watchdog(app: App, polling: dict[str, Any]) -> PollWatchdog | None:
    """The watchdog of `app`, which polls with `polling` (start_polling's arguments); None when it is off."""
    settings = app.bot_data.services.settings
    request = app.bot_data.polling
    if request is None or settings.watchdog_poll_stall_s <= 0:
        return None
    return PollWatchdog(
        app,
        request,
        polling,
        stall_s=settings.watchdog_poll_stall_s,
        max_restarts=settings.watchdog_poll_restarts,
        owner_id=settings.owner_id,
    )


def watch_when_polling(app: App, polling: dict[str, Any]) -> PollWatchdog | None:
    """Start `app`'s watchdog once it has started (its post_init hook) and stop it with it (post_stop)."""
    dog = poll_watchdog(app, polling)
    if dog is None:
        return None
    startup, stopping = app.post_init, app.post_stop

    async def post_init(application: App) -> None:
        if startup is not None:
            await startup(application)
        dog.start()

    async def post_stop(application: App) -> None:
        await dog.aclose()
        if stopping is not None:
            await stopping(application)

    app.post_init = post_init
    app.post_stop = post_stop
    return dog


__all__ = [
    "EXIT_POLL_STALLED",
    "Action",
    "PollHealth",
    "PollWatchdog",
    "PollingRequest",
    "poll_watchdog",
    "watch_when_polling",
]
