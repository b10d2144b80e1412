"""Delivering reminders and scheduled tasks: the clock, sending with retries, task turns.

The database is the truth (core_tools.schedule.delivery); this module only decides *when* to look. One
wake-up is armed on the front end's timer for the earliest time anything is due (a schedule or a retry),
re-armed after each look and when a schedule is created; a 30-second job is the safety net and applies
/timezone changes. A wake-up runs late rather than never (the Telegram timer is a JobQueue job with no
misfire grace: docs/design-notes.md, APScheduler), and what fell due while the bot was down is found at
start, because it is still due in the database. Firings go out through the front end's outbox
(bot/runtime/outbox.py); a task's turn runs through the `run_turn` the composition root gives.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Protocol

from bot.runtime.checkin_jobs import CheckinDelivery
from bot.runtime.outbox import Blocked, Buttons, DeliveryFailed, Outbox, Refused, RetryLater
from bot.runtime.services import Services
from core_tools.agent import TurnInput, TurnResult
from core_tools.errors import BudgetExceeded, TaskBudgetExceeded
from core_tools.schedule.delivery import FAILURES_BEFORE_PAUSE
from core_tools.schedule.service import ScheduleService
from core_tools.schedule.validate import human_delta
from core_tools.usage.tasks import CostAnomaly
from db.attribution import TaskRun, running_task
from db.schedules import CHECKIN, FiringRow
from db.speakers import Speaker

log = logging.getLogger(__name__)

SAFETY_INTERVAL_S = 30.0
LOOK_S = 5.0  # how often the process holding the reminders looks for schedules other processes created
LEASE = "reminders"  # the job lease: one process fires and delivers at a time (bot/runtime/replica.py)
MAX_WAIT_S = 300.0  # re-look at least this often even when nothing is due (clock jumps, missed wake-ups)
BATCH = 500
SEND_CONCURRENCY = 16  # requests in flight at once
# Firings marked `sending` together (one transaction) just before they are sent: after a crash at most
# this many are of unknown delivery (sent again at start, marked as a possible copy).
MARK_CHUNK = 100
LATE_NOTE_AFTER = timedelta(minutes=1)
# A firing skipped because its task reached its monthly limit keeps this mark in its error: the user is
# told at the first of a row of skipped runs, not at every one.
LIMIT_MARK = "monthly limit: "


# A task's turn in its chat (TurnInput -> TurnResult), streaming nothing: its answer is delivered as a firing.
RunTurn = Callable[[TurnInput], Awaitable[TurnResult]]


class Timer(Protocol):
    """The front end's clock for one-off wake-ups (the Telegram adapter's is PTB's JobQueue)."""

    def call_in(self, delay: float, run: Callable[[], Awaitable[None]]) -> Callable[[], None]:
        """Run `run` once, `delay` seconds from now (late rather than never); what cancels it."""


def reminder_buttons(firing_id: int) -> Buttons:
    """The buttons under a fired reminder (/reminders' button handlers answer them)."""
    return (
        (("Snooze 10 min", f"sch:s10:{firing_id}"), ("Snooze 1 h", f"sch:s60:{firing_id}")),
        (("Done", f"sch:done:{firing_id}"),),
    )


def firing_notes(service: ScheduleService, f: FiringRow) -> list[str]:
    """The notes under a firing: a possible copy after a restart, late delivery, occurrences missed."""
    now = service.clock()
    notes = []
    if f.resend:
        notes.append("(I was restarted while sending this; if you already got it, ignore this copy.)")
    late = now - f.due_at
    if not f.snoozed and late > LATE_NOTE_AFTER:
        notes.append(f"(Late by {human_delta(late)}: I was offline at {service.local(f.user_id, f.due_at)}.)")
    if f.missed:
        times = "time" if f.missed == 1 else "times"
        notes.append(
            f"(It also fell due {f.missed} more {times} while I was offline; this is the one catch-up.)"
        )
    return notes


def firing_text(service: ScheduleService, f: FiringRow) -> str:
    """What a firing says: a reminder's text, or a task's answer (Markdown), with its notes."""
    if f.kind == "task":
        body = f"⏰ Scheduled task: {f.text}\n\n{f.result_text or ''}"
    else:
        body = ("⏰ Snoozed reminder: " if f.snoozed else "⏰ ") + f.text
    return "\n\n".join([body, *firing_notes(service, f)])


def failure_text(f: FiringRow, reason: str, paused: bool) -> str:
    """What the chat is told when a scheduled task could not run."""
    text = f"Your scheduled task #{f.schedule_id} (\u201c{f.text[:80]}\u201d) could not run: {reason}"
    if paused:
        text += (
            f"\n\nIt failed {FAILURES_BEFORE_PAUSE} times in a row, so I paused it. "
            "Resume it from /reminders when the problem is solved."
        )
    elif f.repeating:
        text += "\n\nIt will run again at its next time."
    return text


def resume_buttons(schedule_id: int) -> Buttons:
    """The Resume button under the notice that a task was paused (the one /reminders shows)."""
    return (((f"Resume #{schedule_id}", f"sch:resume:{schedule_id}"),),)


def anomaly_text(f: FiringRow, anomaly: CostAnomaly) -> str:
    """What the chat is told when a task run cost far more than usual and the task was paused."""
    return (
        f"This run of your scheduled task #{f.schedule_id} (\u201c{f.text[:80]}\u201d) cost "
        f"{anomaly.describe()}, so I paused the task: it does not run again until you resume it. "
        "/reminders shows what it spent this month."
    )


@dataclass(frozen=True)
class TaskOutcome:
    """A task firing's turn: its answer (kept on the firing), or what to tell the chat about its failure;
    `paused` is told after the answer: the run cost far more than usual and the task is paused."""

    answer: str | None
    notice: str | None = None
    paused: str | None = None


async def run_task(services: Services, f: FiringRow, run_turn: RunTurn) -> TaskOutcome:
    """Run a task's turn through `run_turn` (caps and the task's own monthly limit checked first, accounted
    as `scheduled` and to the task); a run far costlier than usual pauses the task."""
    service = services.schedules.service
    service.mark_sending([f.id])
    schedule = service.store.get(f.schedule_id)
    limit = schedule.max_cost_per_month if schedule is not None else None
    try:
        # Every LLM call made for the turn is recorded against this run and held against the task's limit.
        with running_task(TaskRun(f.user_id, f.schedule_id, f.id, limit)):
            # The caps are checked before anything is stored or sent; the agent checks them again.
            services.usage_service.check(f.user_id, "scheduled")
            turn = TurnInput(
                Speaker(f.user_id, f.chat_id, f.chat_type),
                f"(Scheduled task #{f.schedule_id}, set earlier by the user; do it now.)\n{f.text}",
                purpose="scheduled",
            )
            result = await run_turn(turn)
    except asyncio.CancelledError:
        raise
    except TaskBudgetExceeded as exc:
        # Not a failure of the task: it runs again once a new month starts (or its limit is raised).
        log.info("scheduled task %s (firing %s) skipped: %s", f.schedule_id, f.id, exc)
        told = (service.store.previous_error(f.schedule_id, f.id) or "").startswith(LIMIT_MARK)
        service.record([(f.id, service.outcome_failed(f.attempts + 1, f"{LIMIT_MARK}{str(exc)[:480]}"))])
        return TaskOutcome(None, None if told else f"{exc} Runs until then are skipped.")
    except Exception as exc:
        reason = str(exc) if isinstance(exc, BudgetExceeded) else f"{type(exc).__name__}: {exc}"
        log.warning("scheduled task %s (firing %s) failed: %s", f.schedule_id, f.id, reason)
        service.record([(f.id, service.outcome_failed(f.attempts + 1, reason[:500]))])
        paused = service.task_failed(f.schedule_id)
        return TaskOutcome(None, failure_text(f, reason, paused))
    service.task_succeeded(f.schedule_id)
    answer = result.text.strip() or "(The task produced no answer.)"
    # Kept before sending: a failed send is retried with this answer, never by running the turn again.
    service.record([(f.id, {"result_text": answer})])
    # A few queries over the usage log: in a worker thread, off the event loop.
    return TaskOutcome(answer, paused=await asyncio.to_thread(_pause_if_costly, services, f))


def _pause_if_costly(services: Services, f: FiringRow) -> str | None:
    """Pause the task when this run cost more than SCHEDULE_COST_ANOMALY_X times its median run; what to
    tell the chat then, else None."""
    try:
        anomaly = services.usage_service.task_cost_anomaly(
            f.user_id, f.schedule_id, f.id, services.settings.schedule_cost_anomaly_x
        )
        if anomaly is None or not services.schedules.service.pause_for_cost(f.schedule_id):
            return None
    except Exception:  # the answer is paid for and kept: a failing check must not lose it
        log.exception("scheduled task %s: could not check the cost of its run", f.schedule_id)
        return None
    log.warning("scheduled task %s paused: its run %s cost %s", f.schedule_id, f.id, anomaly.describe())
    return anomaly_text(f, anomaly)


class ScheduleRunner:
    """Fires due schedules and delivers their firings through the front end's outbox."""

    def __init__(
        self,
        services: Services,
        outbox: Outbox,
        run_turn: RunTurn,
        timer: Timer,
        checkins: CheckinDelivery | None = None,
    ) -> None:
        """`run_turn` runs a task's turn in its chat; `timer` arms the wake-ups (the application's job queue,
        which runs them once the application does); `checkins` delivers check-in firings (none: they are
        recorded as skipped)."""
        self.services = services
        self.checkins = checkins
        self.outbox = outbox
        self.run_turn = run_turn
        self.timer = timer
        self.service: ScheduleService = services.schedules.service
        self.in_flight: set[int] = set()
        self._lock = asyncio.Lock()
        self._cancel: Callable[[], None] | None = None  # cancels the armed wake-up
        self._armed_for: float | None = None  # the loop time the armed wake-up runs at
        self._closed = False
        self._tasks: set[asyncio.Task[None]] = set()
        self._send_slots = asyncio.Semaphore(SEND_CONCURRENCY)

    # ------------------------------------------------------------------ the clock

    def wake(self) -> None:
        """Something may be due sooner than the armed time (a schedule was created or snoozed)."""
        self.arm(self.service.next_wake())

    def arm(self, when: datetime | None) -> None:
        """Make sure a look happens at `when` (or sooner); one wake-up at a time is armed."""
        if when is None or self._closed:
            return
        # Compared on the event loop's monotonic clock: a jump of the wall clock cannot strand the wake-up.
        delay = min(max(0.0, (when - self.service.clock()).total_seconds()), MAX_WAIT_S)
        target = asyncio.get_running_loop().time() + delay
        if self._cancel is not None and self._armed_for is not None and self._armed_for <= target:
            return
        if self._cancel is not None:
            self._cancel()
        self._cancel = self.timer.call_in(delay, self._tick_job)
        self._armed_for = target

    def _leading(self) -> tuple[bool, bool]:
        """(this process fires the schedules now, it has just taken that over: recover first); neither once
        the runner is closed."""
        if self._closed:
            return False, False
        return self.services.replica.holds_job(LEASE)

    async def startup_job(self) -> None:
        """At start (bot/runtime/jobs.py): recover and deliver, when this process holds the reminders."""
        if self._leading()[0]:
            await self.startup()

    async def _tick_job(self) -> None:
        self._cancel, self._armed_for = None, None
        held, fresh = self._leading()
        if fresh:
            await self.startup()  # the process that held it died: its cut deliveries are recovered
        elif held:
            await self.tick()

    async def look_job(self) -> None:
        """Every LOOK_S: re-arm for schedules other processes created; a new holder recovers first."""
        held, fresh = self._leading()
        if fresh:
            await self.startup()
        elif held:
            self.arm(self.service.next_wake())

    async def safety_job(self) -> None:
        """Every SAFETY_INTERVAL_S: apply /timezone changes and deliver what is due."""
        held, fresh = self._leading()
        if fresh:
            await self.startup()
            return
        if not held:
            return
        try:
            if await asyncio.to_thread(self.service.reconcile_zones):
                log.info("schedules moved to a new time zone")
        except Exception:
            log.exception("could not apply time zone changes to schedules")
        await self.tick()

    async def startup(self) -> dict[str, int]:
        """Recover firings cut by a restart, repair, apply zone changes, then deliver what is due."""
        # Each works out next times (bounded, but CPU work): in a worker thread, off the event loop.
        resend, failed = await asyncio.to_thread(self.service.recover)
        repaired = await asyncio.to_thread(self.service.repair)
        moved = await asyncio.to_thread(self.service.reconcile_zones)
        counts = self.service.store.count_by_status()
        log.info(
            "schedules at start: %s; %d firing(s) to resend after a restart, %d interrupted task(s), "
            "%d repaired, %d moved to a new zone",
            ", ".join(f"{n} {k}" for k, n in sorted(counts.items())) or "none",
            len(resend),
            len(failed),
            repaired,
            moved,
        )
        await self._report_cut(failed)
        await self.tick()
        return {"resend": len(resend), "failed": len(failed), "repaired": repaired, "moved": moved}

    async def _report_cut(self, failed: list[FiringRow]) -> None:
        for f in failed:
            await self._tell(
                f.chat_id,
                f"I was restarted while running your scheduled task #{f.schedule_id} "
                f"(\u201c{f.text[:80]}\u201d); it did not finish, and I did not run it again so that it does "
                "not cost twice.",
            )

    def left_sending(self) -> list[int] | None:
        """The firings in `sending` that this process is not sending (a killed process left them there);
        None when another process fires the schedules (it knows what it sends)."""
        if self._closed or not self.services.replica.holding(LEASE):
            return None
        return [f.id for f in self.service.store.firings_in("sending") if f.id not in self.in_flight]

    async def recover_left(self, ids: list[int]) -> int:
        """Recover firings left in `sending` (the watchdog found them) as a start does: a message is sent
        again marked as a possible copy, a cut task is failed and its user told; how many."""
        ids = [i for i in ids if i not in self.in_flight]
        resend, failed = await asyncio.to_thread(self.service.recover, ids)
        await self._report_cut(failed)
        await self.tick()
        return len(resend) + len(failed)

    async def tick(self) -> None:
        """Fire what is due, send the due firings, re-arm for the next time (nothing once closed)."""
        if self._closed:
            return
        async with self._lock:
            try:
                started = time.monotonic()
                # Advancing every due schedule works out its next time: off the event loop.
                fired = await asyncio.to_thread(self.service.fire_due)
                if fired:
                    log.info(
                        "fired %d schedule(s) in %.0f ms", len(fired), (time.monotonic() - started) * 1000
                    )
                while True:
                    firings = self.service.due_firings(BATCH, exclude=list(self.in_flight))
                    if not firings:
                        break
                    checkins = [f for f in firings if f.kind == CHECKIN]
                    messages = [
                        f
                        for f in firings
                        if f.kind != CHECKIN and (f.kind == "message" or f.result_text is not None)
                    ]
                    sendable = {f.id for f in messages} | {f.id for f in checkins}
                    for f in firings:
                        self.in_flight.add(f.id)
                        if f.id not in sendable:
                            self._spawn(self._task_firing(f))
                    if checkins:
                        self._spawn(self._checkin_firings(checkins))
                    started = time.monotonic()
                    await self._send_batch(messages)
                    if messages:
                        log.info(
                            "sent %d firing(s) in %.0f ms", len(messages), (time.monotonic() - started) * 1000
                        )
                    if len(firings) < BATCH:
                        break
            except Exception:
                log.exception("the schedule job failed; it runs again shortly")
                self.arm(self.service.clock() + timedelta(seconds=5))
                return
        self.arm(self.service.next_wake())

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for running task firings (tests)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def aclose(self) -> None:
        """At shutdown: disarm, and cut the task turns still running (the next start reports their firings,
        as after a crash); nothing is armed from here on."""
        self._closed = True
        if self._cancel is not None:
            self._cancel()
            self._cancel, self._armed_for = None, None
        running = list(self._tasks)
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)

    # ------------------------------------------------------------------ sending

    async def _send_batch(self, firings: list[FiringRow]) -> None:
        if not firings:
            return
        try:
            for i in range(0, len(firings), MARK_CHUNK):
                chunk = firings[i : i + MARK_CHUNK]
                # `sending` is committed before these requests leave: a crash mid-send leaves at most one
                # chunk whose delivery is unknown at the next start.
                self.service.mark_sending([f.id for f in chunk])
                results = await asyncio.gather(*(self._deliver(f) for f in chunk))
                self.service.record([r for r in results if r is not None])
        finally:
            for f in firings:
                self.in_flight.discard(f.id)

    async def _deliver(self, f: FiringRow) -> tuple[int, dict[str, Any]] | None:
        """Send one firing; returns the row values of its outcome."""
        text = firing_text(self.service, f)
        task = f.kind == "task"  # a task's answer is the model's Markdown; a reminder has its buttons
        buttons = () if task else reminder_buttons(f.id)
        attempts = f.attempts + 1
        try:
            async with self._send_slots:  # set in a forum topic: the outbox sends it there
                message_id = await self.outbox.send(f.chat_id, text, markdown=task, buttons=buttons)
        except Blocked as exc:
            # The user blocked the bot (or it left the group): pause instead of failing every occurrence.
            self.service.pause_chat(f.chat_id, "blocked")
            return f.id, self.service.outcome_failed(attempts, f"forbidden: {exc}")
        except RetryLater as exc:
            return f.id, self.service.outcome_retry(attempts, str(exc), exc.seconds)
        except Refused as exc:
            log.warning("firing %s to chat %s refused: %s", f.id, f.chat_id, exc)
            return f.id, self.service.outcome_failed(attempts, str(exc))
        except DeliveryFailed as exc:  # network trouble, timeouts, 5xx: try again after a backoff
            log.warning("firing %s to chat %s failed (try %d): %s", f.id, f.chat_id, attempts, exc)
            return f.id, self.service.outcome_retry(attempts, str(exc))
        return f.id, self.service.outcome_sent(message_id)

    # ------------------------------------------------------------------ tasks

    async def _task_firing(self, f: FiringRow) -> None:
        try:
            outcome = await run_task(self.services, f, self.run_turn)
            if outcome.notice is not None:
                await self._tell(f.chat_id, outcome.notice)
            if outcome.answer is None:
                return
            result = await self._deliver(replace(f, result_text=outcome.answer))
            if result is not None:
                self.service.record([result])
            if outcome.paused is not None:
                await self._tell(f.chat_id, outcome.paused, resume_buttons(f.schedule_id))
        except Exception:
            log.exception("scheduled task firing %s failed", f.id)
            self.service.record([(f.id, self.service.outcome_failed(f.attempts + 1, "internal error"))])
        finally:
            self.in_flight.discard(f.id)
        self.arm(self.service.next_wake())

    async def _checkin_firings(self, firings: list[FiringRow]) -> None:
        """Due check-ins: planned without an LLM, sent only when something is due (a digest asks the
        model, which is why this runs beside the reminders' sends, not in their batch)."""
        try:
            if self.checkins is None:
                self.service.record(
                    [(f.id, {"status": "skipped", "error": "check-ins off"}) for f in firings]
                )
            else:
                await self.checkins.deliver(firings)
        except Exception:
            log.exception("check-in firings %s failed", [f.id for f in firings])
            self.service.record(
                [(f.id, self.service.outcome_failed(f.attempts + 1, "internal error")) for f in firings]
            )
        finally:
            for f in firings:
                self.in_flight.discard(f.id)
        self.arm(self.service.next_wake())

    async def _tell(self, chat_id: int, text: str, buttons: Buttons = ()) -> None:
        try:
            await self.outbox.send(chat_id, text, buttons=buttons)
        except Blocked:
            self.service.pause_chat(chat_id, "blocked")
        except DeliveryFailed as exc:
            log.warning("could not tell chat %s about a scheduled task: %s", chat_id, exc)
