"""`python -m bot chat`: the same assistant in a terminal, for one local user.

The terminal user is the owner (OWNER_USER_ID, else the first of ALLOWED_USER_IDS; user 0 when there is
none) in their private chat, so the conversation, memories, reminders and usage are the ones they have in
Telegram. Its turns go through the same turn runtime as Telegram's (bot/runtime/runner.py, with the
terminal as its front end: bot/terminal/front.py): lines are stored in the chat's inbox the moment they are
typed, answered in order, a burst typed before the answer starts is answered once, `/stop` (or Ctrl-C)
stops the answer being written at once, `/retry` answers the last message again, and a call that needs
approval is asked about here. Whatever arrives on its own (a reminder, a scheduled task's answer, a file
saved, a background job) is shown on lines of its own (bot/terminal/delivery.py).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from bot.runtime.queue import Incoming
from bot.runtime.runner import TurnRunner
from bot.runtime.services import Services
from bot.terminal.approvals import TerminalAsker
from bot.terminal.commands import TerminalCommands
from bot.terminal.console import Console, read_lines
from bot.terminal.delivery import TerminalReminders
from bot.terminal.front import TerminalFront
from bot.texts.catalog import new_session_text
from bot.texts.models import ModelChoice
from core_tools.types import ChatType
from db.runtime import Entry
from db.speakers import Speaker

log = logging.getLogger(__name__)

APOLOGY = "Sorry, something went wrong on my side. It is logged; please try again."
TYPED = "\x00typed"  # in the line queue: a message went to the turn runner as it was typed


class TerminalChat:
    """The chat loop: typed messages go to the turn runner at once, commands are answered in order; /stop and
    Ctrl-C stop a turn; the prompt shows once every turn typed so far is answered."""

    def __init__(
        self,
        services: Services,
        user_id: int,
        out_dir: Path,
        console: Console,
        woken: asyncio.Event,
    ) -> None:
        """`console` and `woken` are the ones the services deliver to (bot/process/fronts.py, build_terminal):
        the notices and files of code runs, and the schedule tool's wake-up of the reminders."""
        self.services = services
        self.user_id = self.chat_id = user_id  # the user's private chat, as in Telegram
        self.out_dir = out_dir
        self.console = console
        settings = services.settings
        self.models = ModelChoice(settings.models, services.conversations, services.usage_service.prices)
        self.runner = TurnRunner(
            services.agent,
            services.conversations,
            services.code,
            services.replica.chats,
            TerminalFront(console),
            debounce_s=settings.message_debounce_ms / 1000,
            merge_bursts=settings.message_merge_bursts,
            fold_bursts=settings.message_fold_bursts,
            model_for=self.models.for_chat,
        )
        self.locks = self.runner.locks  # turns and scheduled tasks take turns in the chat
        self.commands = TerminalCommands(services, user_id, self.models)
        self.reminders = TerminalReminders(
            services, self.chat_id, self.console, self.runner.quiet_turn, woken
        )
        # A call that needs approval is asked about here (y/n/always), not refused.
        self.asker: TerminalAsker | None = None
        if services.approvals is not None:
            self.asker = TerminalAsker(services.approvals.store, console, services.approvals.timeout_s)
            services.approvals.asker = self.asker
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._turns: set[asyncio.Task[Any]] = set()  # submitted messages, /retry: the runner's tasks
        self._idle = asyncio.Event()
        self._idle.set()
        self._quitting = False
        self._echoed = os.isatty(0)

    async def start(self) -> None:
        """Start the services (they deliver to this terminal: bot/process/fronts.py, build_terminal)."""
        s = self.services
        await s.start()
        owner = " (the owner)" if s.usage_service.is_owner(self.user_id) else ""
        self.console.line(
            f"Terminal chat as user {self.user_id}{owner}. /help lists the commands; /stop or Ctrl-C stops "
            "an answer; /quit or Ctrl-D leaves."
        )
        self.console.line(f"Files your code runs write are saved to {self.out_dir.resolve()}.")
        self.reminders.start()

    async def close(self) -> None:
        """Stop delivering reminders (the services are closed by the caller)."""
        await self.reminders.stop()

    # ------------------------------------------------------------------ input

    def _arrived(self, line: str | None) -> None:
        """A line from the reader thread: a message goes to the runner at once (a burst is answered once,
        a message typed during an answer waits in the inbox), /stop acts at once on a running answer, an
        answer to an approval question decides it, a command waits its turn."""
        text = (line or "").strip()
        if line is not None and text.lower() == "/stop" and self._turns:
            self._spawn(self._stop())
            return
        if self.asker is not None and self.asker.waiting:  # the answer to "May I run ...?"
            self.console.at_line_start = self._echoed
            self.asker.typed(line)
            if line is not None:
                return
        if text and not text.startswith("/") and not self._quitting:
            self._spawn(self.runner.submit(self._message(text)))
            line = TYPED
        self._lines.put_nowait(line)

    def _message(self, text: str) -> Incoming:
        return Incoming(Entry(Speaker(self.user_id, self.chat_id, ChatType.PRIVATE), text))

    def _spawn(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run `work` (a turn, a stop) as a task the prompt waits for."""
        task = asyncio.create_task(work)
        self._turns.add(task)
        self._idle.clear()

        def done(task: asyncio.Task[Any]) -> None:
            self._turns.discard(task)
            if not task.cancelled() and task.exception() is not None:
                log.error("a turn in the terminal failed", exc_info=task.exception())
                self.console.line(APOLOGY)
            if not self._turns:
                self._idle.set()

        task.add_done_callback(done)

    def _start_reader(self) -> None:
        loop = asyncio.get_running_loop()

        def post(line: str | None) -> bool:
            try:
                loop.call_soon_threadsafe(self._arrived, line)
            except RuntimeError:  # the loop is closed: the chat is over
                return False
            return True

        threading.Thread(target=read_lines, args=(0, post), name="stdin", daemon=True).start()

    async def _stop(self) -> None:
        notice = await self.runner.stop(self.chat_id, self.user_id, True)
        if notice:
            self.console.line(notice)

    def _interrupt(self) -> None:
        """Ctrl-C: stop the answer being written; at the prompt, leave."""
        if self._turns:
            self._spawn(self._stop())
        else:
            self._quit()

    def _quit(self) -> None:
        """SIGTERM (or Ctrl-C at the prompt): leave now; a running turn is cut and stored as interrupted."""
        self._quitting = True
        for task in list(self._turns):
            task.cancel()
        self._lines.put_nowait(None)

    async def run(self) -> None:
        """Answer lines until /quit, the end of the input, Ctrl-C at the prompt or SIGTERM."""
        loop = asyncio.get_running_loop()
        self._start_reader()
        handlers = {signal.SIGINT: self._interrupt, signal.SIGTERM: self._quit}
        for sig, handler in handlers.items():
            loop.add_signal_handler(sig, handler)
        try:
            while not self._quitting:
                await self._idle.wait()  # every message typed so far is answered
                if self._quitting:
                    break
                if self._lines.empty():
                    self.console.prompt()
                line = await self._lines.get()
                if line is None or self._quitting:
                    break
                self.console.input_read(self._echoed)
                if line != TYPED and (text := line.strip()) and not await self.handle(text):
                    break
            if self._turns:  # the end of the input: the answers being written are finished first
                await asyncio.wait(list(self._turns))
        finally:
            for sig in handlers:
                loop.remove_signal_handler(sig)
        self.console.line("")

    async def handle(self, text: str) -> bool:
        """Answer one command (or a message, as typed); False when it asks to leave."""
        if not text.startswith("/"):
            self._spawn(self.runner.submit(self._message(text)))
            return True
        head, _, rest = text[1:].partition(" ")
        name = head.lower()
        if name in ("quit", "exit"):
            return False
        try:
            if name == "stop":
                await self._stop()
            elif name == "newsession":
                async with self.locks.hold(self.chat_id):
                    result = await self.services.sessions.new_session(
                        self.user_id, self.chat_id, rest.strip()[:200] or None, ChatType.PRIVATE
                    )
                self.console.line(new_session_text(result))
            elif name == "retry":
                self._spawn(self._retry())
            else:
                replies, _ = await self.commands.reply(name, rest.split())
                for reply in replies:
                    self.console.line(reply)
        except Exception:  # as the Telegram bot's error handler: say so briefly, keep serving
            log.exception("the command %r failed", text[:100])
            self.console.line(APOLOGY)
        return True

    async def _retry(self) -> None:
        """/retry: answer the last message of the session again (its old answer is kept, unseen)."""
        notice = await self.runner.retry(self._message(""), is_owner=True)
        if notice:
            self.console.line(notice)
