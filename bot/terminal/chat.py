"""`python -m bot chat`: the same assistant in a terminal, for one local user.

The terminal user is the owner (OWNER_USER_ID, else the first of ALLOWED_USER_IDS; user 0 when there is
none) in their private chat, so the conversation, memories, reminders and usage are the ones they have in
Telegram. Lines are answered in order; `/stop` (or Ctrl-C) stops the answer being written at once, and
whatever arrives on its own (a reminder, a scheduled task's answer, a file saved, a background job) is
shown on lines of its own (bot/terminal/delivery.py).
"""

from __future__ import annotations

import asyncio
import codecs
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from bot.adapter.answers import NOTHING_RUNS, STOP_NOTES, STOPPED_MARK, turn_failure_text
from bot.runtime.leases import ChatLocks
from bot.runtime.services import Services
from bot.terminal.approvals import TerminalAsker
from bot.terminal.commands import TerminalCommands
from bot.terminal.delivery import TerminalReminders
from bot.texts.catalog import new_session_text
from bot.texts.models import ModelChoice
from core_tools.agent import TurnControl, TurnInput, TurnResult
from core_tools.errors import BudgetExceeded, LLMUnavailable
from core_tools.types import ChatType

log = logging.getLogger(__name__)

PROMPT = "you> "
ANSWER = "assistant> "
APOLOGY = "Sorry, something went wrong on my side. It is logged; please try again."


class Console:
    """The terminal's output. An answer streams after its prefix; a notice (a reminder, a saved file, a
    status line) gets lines of its own, after which the prompt or the answer's prefix is shown again."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout
        self.mode = ""  # "prompt" while waiting for input, "answer" while one streams
        self.at_line_start = True
        self.answered = False  # some of the current answer was written
        self.asked_in = ""  # the mode a question interrupted

    def _write(self, text: str) -> None:
        if text:
            self.stream.write(text)
            self.stream.flush()  # a pipe is block-buffered: every piece must show at once
            self.at_line_start = text.endswith("\n")

    def _new_line(self) -> None:
        if not self.at_line_start:
            self._write("\n")

    def prompt(self) -> None:
        """Ask for the next line."""
        self._new_line()
        self._write(PROMPT)
        self.mode = "prompt"

    def input_read(self, echoed: bool) -> None:
        """A line was read (a terminal echoed its newline; a pipe did not)."""
        self.at_line_start = echoed
        self.mode = ""

    def line(self, text: str) -> None:
        """A reply of its own (a command's answer)."""
        self._new_line()
        self._write(text + "\n")

    def answer_start(self) -> None:
        """An answer begins."""
        self._new_line()
        self._write(ANSWER)
        self.mode = "answer"
        self.answered = False

    def answer(self, text: str) -> None:
        """More of the answer."""
        self._write(text)
        self.answered = self.answered or bool(text)

    def answer_restart(self) -> None:
        """The answer starts over (a new round of the turn)."""
        self._write("\n")

    def answer_end(self, note: str | None = None) -> None:
        """The answer is over; `note` says how it ended, when it matters."""
        if note:
            self._write(f"\n\n{note}" if self.answered else note)
        self._write("\n")
        self.mode = ""

    def question(self, text: str) -> None:
        """A question the next line typed answers (a tool call's approval); no newline after it."""
        self._new_line()
        self._write(text)
        if self.mode != "question":
            self.asked_in = self.mode
        self.mode = "question"

    def decided(self, text: str) -> None:
        """The question is answered (or ended): say how, and go on where it was asked."""
        if self.mode != "question":
            self.asked_in = self.mode
        self._new_line()
        self._write(text + "\n")
        self.mode = self.asked_in
        if self.mode == "answer":
            self._write(ANSWER)

    def notice(self, text: str) -> None:
        """Something that arrived on its own, on lines of its own; then the prompt or prefix again."""
        self._new_line()
        self._write(text + "\n")
        if self.mode == "prompt":
            self._write(PROMPT)
        elif self.mode == "answer":
            self._write(ANSWER)


class TerminalSink:
    """The turn's sink: prints the answer as it streams, and status lines."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.printed = 0

    async def text(self, partial: str) -> None:
        """Print what is new since the last call."""
        if len(partial) < self.printed:  # a new round started over
            self.console.answer_restart()
            self.printed = 0
        self.console.answer(partial[self.printed :])
        self.printed = len(partial)

    async def status(self, line: str) -> None:
        """Print a status line."""
        self.console.notice(f"[{line}]")
        self.printed = 0


def read_lines(fd: int, post: Callable[[str | None], bool]) -> None:
    """Read lines from `fd` until its end (then None), handing each to `post` until it returns False.

    Plain os.read in a daemon thread: it holds no lock of sys.stdin that the interpreter's exit could wait
    for, and it works whatever stdin is (a terminal, a pipe, a file)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        pending += decoder.decode(chunk, final=not chunk)
        *lines, pending = pending.split("\n")
        for line in lines:
            if not post(line):
                return
        if not chunk:
            if pending:
                post(pending)
            post(None)
            return


class TerminalChat:
    """The chat loop: typed lines become turns or commands, in order; /stop and Ctrl-C stop a turn."""

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
        self.locks = ChatLocks(services.replica.chats)  # turns and scheduled tasks take turns in the chat
        self.models = ModelChoice(settings.models, services.conversations, services.usage_service.prices)
        self.commands = TerminalCommands(services, user_id, self.models)
        self.reminders = TerminalReminders(services, self.chat_id, self.console, self.locks.hold, woken)
        # A call that needs approval is asked about here (y/n/always), not refused.
        self.asker: TerminalAsker | None = None
        if services.approvals is not None:
            self.asker = TerminalAsker(services.approvals.store, console, services.approvals.timeout_s)
            services.approvals.asker = self.asker
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._running: tuple[asyncio.Task[TurnResult], TurnControl] | None = None
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
        """A line from the reader thread: /stop acts at once on a running answer, the rest waits its turn."""
        if line is not None and line.strip().lower() == "/stop" and self._running is not None:
            self._stop_turn()
            return
        if self.asker is not None and self.asker.waiting:  # the answer to "May I run ...?"
            self.console.at_line_start = self._echoed
            self.asker.typed(line)
            if line is not None:
                return
        self._lines.put_nowait(line)

    def _start_reader(self) -> None:
        loop = asyncio.get_running_loop()

        def post(line: str | None) -> bool:
            try:
                loop.call_soon_threadsafe(self._arrived, line)
            except RuntimeError:  # the loop is closed: the chat is over
                return False
            return True

        threading.Thread(target=read_lines, args=(0, post), name="stdin", daemon=True).start()

    def _stop_turn(self) -> None:
        if self._running is not None:
            task, control = self._running
            control.stop_requested = True
            task.cancel()

    def _interrupt(self) -> None:
        """Ctrl-C: stop the answer being written; at the prompt, leave."""
        if self._running is not None:
            self._stop_turn()
        else:
            self._quit()

    def _quit(self) -> None:
        """SIGTERM (or Ctrl-C at the prompt): leave now; a running turn is cut and stored as interrupted."""
        self._quitting = True
        if self._running is not None:
            self._running[0].cancel()
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
                self.console.prompt()
                line = await self._lines.get()
                if line is None or self._quitting:
                    break
                self.console.input_read(self._echoed)
                text = line.strip()
                if text and not await self.handle(text):
                    break
        finally:
            for sig in handlers:
                loop.remove_signal_handler(sig)
        self.console.line("")

    async def handle(self, text: str) -> bool:
        """Answer one line; False when it asks to leave."""
        if not text.startswith("/"):
            turn = TurnInput(
                self.user_id,
                self.chat_id,
                text,
                chat_type=ChatType.PRIVATE,
                model=self.models.for_chat(self.chat_id),
            )
            await self._turn(turn)
            return True
        head, _, rest = text[1:].partition(" ")
        name = head.lower()
        if name in ("quit", "exit"):
            return False
        try:
            if name == "stop":
                self.console.line(NOTHING_RUNS)
            elif name == "newsession":
                async with self.locks.hold(self.chat_id):
                    result = await self.services.sessions.new_session(
                        self.user_id, self.chat_id, rest.strip()[:200] or None, ChatType.PRIVATE
                    )
                self.console.line(new_session_text(result))
            elif name == "retry":
                await self._retry()
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
        conv = self.services.conversations
        session = conv.current_session(self.user_id, self.chat_id, chat_type=ChatType.PRIVATE)
        last = conv.last_user_message(session.id)
        if last is None:
            self.console.line("There is nothing to retry in this session yet.")
            return
        turn = TurnInput(
            self.user_id,
            self.chat_id,
            last.content,
            chat_type=ChatType.PRIVATE,
            rerun_of=last.id,
            model=self.models.for_chat(self.chat_id),
        )
        await self._turn(turn)

    # ------------------------------------------------------------------ a turn

    async def _turn(self, turn: TurnInput) -> None:
        control = TurnControl()
        sink = TerminalSink(self.console)
        async with self.locks.hold(self.chat_id):  # after a scheduled task's turn in this chat, if one runs
            self.console.answer_start()
            task = asyncio.create_task(self.services.agent.run_turn(turn, sink, control))
            self._running = (task, control)
            try:
                await asyncio.wait({task})
            finally:
                self._running = None
            if control.stop_requested and control.message_ids:
                await self.services.code.cancel_turn(control.message_ids[0])  # its background jobs too
        self.console.answer_end(self._ending(task, sink))

    @staticmethod
    def _ending(task: asyncio.Task[TurnResult], sink: TerminalSink) -> str | None:
        """What follows the streamed text: the answer if nothing streamed, how the turn ended."""
        if task.cancelled():
            return STOPPED_MARK
        exc = task.exception()
        if exc is not None:
            if not isinstance(exc, BudgetExceeded | LLMUnavailable | TimeoutError):
                log.error("error while answering in the terminal", exc_info=exc)
            return turn_failure_text(exc)
        result = task.result()
        if result.stopped_by == "user":
            return STOPPED_MARK
        notes = [] if sink.printed else [result.text.strip() or "(I have no answer to that.)"]
        if result.stopped_by in STOP_NOTES:
            notes.append(STOP_NOTES[result.stopped_by])
        return "\n\n".join(notes) or None
