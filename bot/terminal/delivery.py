"""What reaches the terminal chat outside its own turns: reminders and scheduled tasks, files a code run
wrote under out/, and notices (a background code job finished, a cap reached).

The terminal is not one of the bot's processes on the database (bot/runtime/replica.py): it holds the reminder
job's lease under an id no process heartbeats for, so a Telegram bot process on the same database takes the
lease at once, and while one runs, that process delivers the reminders (in Telegram) and the terminal
prints none. Only the terminal chat's own schedules fire here: another chat's wait for a bot process, which
delivers them with their "late" note and missed occurrences counted once.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from bot.runtime.schedule_jobs import LEASE, LOOK_S, RunTurn, firing_text, run_task
from bot.runtime.services import Services
from core_tools.types import OutputFile
from db.schedules import CHECKIN, FiringRow

log = logging.getLogger(__name__)

BATCH = 100
HANDED_OVER = "(A Telegram bot runs on this database: it delivers your reminders, in Telegram.)"
TAKEN_BACK = "(No Telegram bot holds the reminders any more: they are shown here again.)"


class Notices(Protocol):
    """Where the terminal shows something that arrives on its own (bot.terminal.console.Console)."""

    def notice(self, text: str) -> None:
        """Show `text` on lines of its own."""


class TerminalNotifier:
    """core_tools' Notifier: messages to the terminal's chat are shown; another chat's cannot be delivered
    from here (they are logged)."""

    def __init__(self, out: Notices, chat_id: int) -> None:
        self.out = out
        self.chat_id = chat_id

    async def send(self, chat_id: int, text: str) -> None:
        """Show a message for the terminal's chat."""
        if chat_id != self.chat_id:
            log.warning("a message for chat %s cannot be delivered from the terminal", chat_id)
            return
        self.out.notice(text)


class TerminalFiles:
    """core_tools' FileSink: the files a code run wrote under out/ are saved to a folder, never over an
    existing file (plot.png, then plot-2.png, ...), and their paths are shown."""

    def __init__(self, folder: Path, out: Notices) -> None:
        self.folder = folder
        self.out = out

    async def send_files(
        self, chat_id: int, files: list[OutputFile], skipped: Sequence[str] = ()
    ) -> list[str]:
        """Save each file, then name those not saved and why; a line per file that could not be saved."""
        failed: list[str] = []
        for f in files:
            try:
                path = await asyncio.to_thread(self._save, f)
            except OSError as exc:
                log.warning("could not save %s to %s: %s", f.name, self.folder, exc)
                failed.append(f"{f.name}: could not be saved ({exc.strerror or exc})")
                continue
            self.out.notice(f"[file saved: {path}]")
        for line in [*skipped, *failed]:
            self.out.notice(f"[file not saved: {line}]")
        return failed

    def _save(self, f: OutputFile) -> Path:
        # Only the last part of the name: nothing a run names can write outside the folder.
        name = PurePosixPath(f.name).name
        if name in ("", ".", ".."):
            name = "file"
        stem, dot, suffix = name.rpartition(".")
        if not stem:  # ".env" or "README": no suffix to keep
            stem, dot, suffix = name, "", ""
        self.folder.mkdir(parents=True, exist_ok=True)
        for n in itertools.count(1):
            candidate = self.folder / (name if n == 1 else f"{stem}-{n}{dot}{suffix}")
            try:
                with candidate.open("xb") as out:  # "x": an existing file is never overwritten
                    out.write(f.data)
            except FileExistsError:
                continue
            return candidate.resolve()
        raise AssertionError("unreachable")


class TerminalReminders:
    """Fires the terminal chat's schedules and shows their firings: a reminder with the typed commands
    that replace its buttons, a task's answer once its turn ran (holding the chat, like a typed message)."""

    def __init__(
        self,
        services: Services,
        chat_id: int,
        out: Notices,
        run_turn: RunTurn,
        woken: asyncio.Event,
    ) -> None:
        """`run_turn` runs a task's turn (the terminal's turn runner: it waits for the chat like a typed
        message); `woken` is set when something may be due sooner (the schedule tool rings it:
        bot/process/fronts.py gave the tool its `set`)."""
        self.services = services
        self.service = services.schedules.service
        self.store = services.replica.store
        self.me = services.replica.id
        self.chat_id = chat_id
        self.out = out
        self.run_turn = run_turn
        self.delivering: bool | None = None  # None until the first look
        self._stopping = False
        self._woken = woken
        self._loop_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._in_flight: set[int] = set()

    def start(self) -> None:
        """Start looking (in the running event loop)."""
        self._loop_task = asyncio.create_task(self._loop(), name="terminal-reminders")

    def wake(self) -> None:
        """Something may be due sooner (a schedule was created, snoozed or resumed)."""
        self._woken.set()

    async def stop(self) -> None:
        """Stop looking; a task turn still running is cut (its firing is reported by the next start)."""
        self._stopping = True
        running = [t for t in (self._loop_task, *self._tasks) if t is not None]
        for task in running:
            task.cancel()
        for task in running:
            with suppress(asyncio.CancelledError):
                await task

    async def _loop(self) -> None:
        while not self._stopping:
            self._woken.clear()  # before the look: a wake-up during it is not lost
            try:
                await self.tick()
            except Exception:  # the database is briefly unavailable: look again shortly
                log.exception("the terminal's reminder look failed")
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation that comes as
            # the event is set, and stop() would wait for this loop forever.
            with suppress(TimeoutError):
                async with asyncio.timeout(self._delay()):
                    await self._woken.wait()

    def _delay(self) -> float:
        """Seconds until the next look: when something is due, at most LOOK_S (lease changes)."""
        nxt = self.service.next_wake(self.chat_id) if self.delivering else None
        if nxt is None:
            return LOOK_S
        return min(max(0.0, (nxt - self.service.clock()).total_seconds()), LOOK_S)

    async def tick(self) -> None:
        """Fire the chat's due schedules and show its due firings, while no bot process delivers them."""
        held = self.store.claim_job(LEASE, self.me)
        if held != self.delivering:
            if not held:
                self.out.notice(HANDED_OVER)
            elif self.delivering is False:
                self.out.notice(TAKEN_BACK)
            self.delivering = held
        if not held:
            return
        self.service.fire_due(chat_id=self.chat_id)
        for f in self.service.due_firings(BATCH, exclude=list(self._in_flight), chat_id=self.chat_id):
            if f.kind == CHECKIN:  # a check-in's buttons are Telegram's: its next time comes there
                self.service.record([(f.id, {"status": "skipped", "error": "not delivered in the terminal"})])
            elif f.kind == "message" or f.result_text is not None:
                self._show(f)
            else:
                self._in_flight.add(f.id)
                self.service.mark_sending([f.id])  # not due again while its turn runs
                self._spawn(self._task_firing(f))

    def _show(self, f: FiringRow) -> None:
        self.service.mark_sending([f.id])
        text = firing_text(self.service, f)
        if f.kind == "message":  # the Snooze and Done buttons, typed
            text += (
                f"\n(reminder {f.id}: /reminders snooze {f.id} [MINUTES] to see it again later, "
                f"/reminders done {f.id} when it is done)"
            )
        self.out.notice(text)
        self.service.record([(f.id, self.service.outcome_sent(None))])

    async def _task_firing(self, f: FiringRow) -> None:
        try:
            outcome = await run_task(self.services, f, self.run_turn)
            if outcome.notice is not None:
                self.out.notice(outcome.notice)
            if outcome.answer is not None:
                self._show(replace(f, result_text=outcome.answer))
            if outcome.paused is not None:
                self.out.notice(f"{outcome.paused} (/reminders resume {f.schedule_id})")
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("scheduled task firing %s failed", f.id)
            self.service.record([(f.id, self.service.outcome_failed(f.attempts + 1, "internal error"))])
        finally:
            self._in_flight.discard(f.id)
        self.wake()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
