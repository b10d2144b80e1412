"""The terminal chat (`python -m bot chat`) as a user drives it: the real process on stdin and stdout against
the fake LLM; its commands, reminders printed while it waits for input, files of code runs, /stop, Ctrl-C."""

from __future__ import annotations

import asyncio
import re
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.support.fakes.openai_api import FakeLLM, call, hang, text, tool_calls
from tests.support.harness import OWNER
from tests.support.processes import bot_env
from tests.support.schedules import local_at

pytestmark = pytest.mark.slow  # real `python -m bot chat` processes

PROMPT = "you> "
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


class Terminal:
    """A running `python -m bot chat`: lines go to its stdin, its stdout is collected as it comes."""

    def __init__(self, proc: asyncio.subprocess.Process, log: Path) -> None:
        self.proc = proc
        self.log = log
        self.out = ""
        self._changed = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while chunk := await self.proc.stdout.read(4096):
            self.out += chunk.decode(errors="replace")
            self._changed.set()
        self._changed.set()

    def mark(self) -> int:
        """Where the output is now: `wait_for(..., after=mark)` looks only at what comes later."""
        return len(self.out)

    async def send(self, line: str) -> int:
        """Type a line; returns the mark before its answer."""
        at = self.mark()
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        await self.proc.stdin.drain()
        return at

    async def _until(self, done: Any, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not done() and not (self.proc.returncode is not None and self._reader.done()):
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                return

    async def wait_for(self, *needles: str, after: int = 0, timeout: float = 60.0) -> str:
        """Wait until the output after `after` holds every needle; returns that output."""
        await self._until(lambda: all(n in self.out[after:] for n in needles), timeout)
        seen = self.out[after:]
        missing = [n for n in needles if n not in seen]
        assert not missing, f"missing {missing} in the output:\n{seen}\n--- stderr ---\n{self.errors()}"
        return seen

    async def ready(self, timeout: float = 60.0) -> None:
        """Wait for the prompt: the chat is done with every line typed so far."""
        await self._until(lambda: self.out.endswith(PROMPT), timeout)
        assert self.out.endswith(PROMPT), f"no prompt at the end of:\n{self.out[-2000:]}\n{self.errors()}"

    async def ask(self, line: str, *needles: str, timeout: float = 60.0) -> str:
        """Type a line, wait for the output that answers it and for the next prompt."""
        seen = await self.wait_for(*needles, after=await self.send(line), timeout=timeout)
        await self.ready(timeout)
        return seen

    def errors(self) -> str:
        """What the process wrote to stderr."""
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    async def quit(self) -> int:
        """/quit and wait for the exit; returns the exit code."""
        await self.send("/quit")
        return await self.exit_code()

    async def exit_code(self, timeout: float = 60.0) -> int:
        """Wait for the process to end; returns its exit code."""
        try:
            code = await asyncio.wait_for(self.proc.wait(), timeout)
        except TimeoutError:
            raise AssertionError(f"still running; output:\n{self.out[-3000:]}\n{self.errors()}") from None
        await self._reader
        return code


@asynccontextmanager
async def terminal(
    tmp_path: Path, llm: FakeLLM, *args: str, database_url: str | None = None, **values: str
) -> AsyncIterator[Terminal]:
    """`python -m bot chat` as the owner OWNER, against the fake LLM; killed at the end if it still runs."""
    env = bot_env(
        tmp_path,
        OPENAI_API_KEY="sk-test",
        OPENAI_BASE_URL=llm.base_url,
        LLM_MAX_RETRIES="0",
        ALLOWED_USER_IDS=str(OWNER),
        DATABASE_URL=database_url or f"sqlite:///{tmp_path / 'data' / 'assistant.db'}",
        MEMORY_EXTRACT="false",  # no background LLM calls between the scripted ones
        **values,
    )
    log = tmp_path / "terminal.err"
    with log.open("wb") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "bot",
            "chat",
            *args,
            cwd=tmp_path,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=err,
        )
    term = Terminal(proc, log)
    try:
        await term.wait_for("Terminal chat as user")
        await term.ready()
        yield term
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await term._reader


def memory_store(content: str) -> Any:
    return tool_calls(
        call("memory", {"action": "store", "layer": "long", "content": content, "category": "preference"})
    )


async def test_terminal_commands_answer_as_in_telegram(tmp_path: Path, llm: FakeLLM) -> None:
    async with terminal(tmp_path, llm, LLM_MODELS="fake-model,fake-big") as term:
        assert "as user 111 (the owner)" in term.out

        shown = await term.ask("/help", "/quit")
        assert "/reminders [cancel ID | resume ID" in shown and "/model [NUMBER]" in shown
        assert (
            "/budget USER_ID" in shown and "/memory [search TEXT" in shown
        )  # the terminal user is the owner
        assert "/start" not in shown and "Stop button" not in shown  # nothing that needs Telegram

        llm.script(memory_store("User prefers green tea"), text("Noted: green tea."))
        await term.ask("remember that I prefer green tea", "Noted: green tea.")
        listing = await term.ask("/memory", "Long-term:", "User prefers green tea")
        match = re.search(r"id ([0-9a-f-]{8,})", listing)
        assert match, listing
        await term.ask(f"/memory forget {match.group(1)}", "Forgotten. (/memory undo brings it back.)")
        await term.ask("/memory", "I have no memories about you yet.")

        usage = await term.ask("/usage", "Usage today", "Turns: 1")
        assert "Estimated cost" in usage
        everyone = await term.ask("/usage all", "Usage of all users")  # the owner's form
        assert "111:" in everyone and "you (111)" not in everyone  # the terminal does not rename the owner
        await term.ask("/budget", "Usage: /budget USER_ID daily|monthly AMOUNT")
        await term.ask("/codestats", "No code runs in the last 7 days.")
        await term.ask("/codefailures abc", "Usage: /codefailures [n]")
        await term.ask("/timezone Europe/Berlin", "Time zone set to Europe/Berlin")

        models = await term.ask("/model", "Model of this chat: fake-model", "Choose one with /model NUMBER.")
        assert "1. ✓ fake-model" in models and "2. fake-big" in models
        await term.ask("/model 2", "Model of this chat: fake-big")
        await term.ask("/model 7", "That is not one of the models offered.")
        llm.script(text("Answered by the big one."))
        await term.ask("hello", "Answered by the big one.")
        assert llm.requests[-1]["model"] == "fake-big"

        llm.script(text("Again, by the big one."))
        await term.ask("/retry", "Again, by the big one.")
        assert [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "user"][-1] == "hello"

        await term.ask("/stop", "Nothing is running in this chat, so there is nothing to stop.")
        await term.ask("/newsession Trip planning", "Started a new session: Trip planning.")
        await term.ask("/nonsense", "Commands:", "/quit")
        assert await term.quit() == 0
    assert "Traceback" not in term.errors()


async def test_reminders_and_tasks_are_printed_while_the_chat_waits(
    tmp_path: Path, llm: FakeLLM, database_url: str
) -> None:
    soon = {"action": "create", "text": "Call the dentist"}
    later = {"action": "create", "text": "Water the plants"}
    task = {"action": "create", "text": "Tell me a joke", "kind": "task"}
    llm.script(
        # The time is taken when the request arrives: a slow start cannot put it in the past.
        lambda body: tool_calls(call("schedule", {**soon, "at": local_at(3)})),
        text("I will remind you."),
    )
    async with terminal(tmp_path, llm, database_url=database_url) as term:
        await term.ask("remind me in three seconds to call the dentist", "I will remind you.")
        at = term.mark()
        # Nothing more is typed: the reminder comes on its own, and the prompt is shown again after it.
        await term.wait_for("⏰ Call the dentist", "/reminders done", after=at, timeout=60)
        await term.ready()
        fired = term.out[at:]
        assert fired.startswith("\n⏰ Call the dentist"), fired
        firing = re.search(r"/reminders done (\d+)", fired)
        assert firing, fired
        await term.ask(f"/reminders done {firing.group(1)}", "Done.")
        await term.ask(f"/reminders done {firing.group(1)}", "this reminder is already done")

        llm.script(
            lambda body: tool_calls(call("schedule", {**later, "at": local_at(3600)})),
            text("Noted for later."),
        )
        await term.ask("remind me in an hour to water the plants", "Noted for later.")
        listing = await term.ask("/reminders", "Your reminders and scheduled tasks:", "Water the plants")
        found = re.search(r"#(\d+) reminder: Water the plants", listing)
        assert found and "Call the dentist" not in listing, listing
        assert "/reminders cancel ID" in listing
        await term.ask(f"/reminders cancel {found.group(1)}", f"Cancelled #{found.group(1)}.")
        await term.ask("/reminders", "You have no reminders or scheduled tasks.")
        await term.ask("/reminders cancel x", "Usage: /reminders")

        llm.script(
            lambda body: tool_calls(call("schedule", {**task, "at": local_at(3)})),
            text("I will tell you one."),
            text("Why did the **chicken** cross the road?"),  # the task's own turn
        )
        at = await term.send("in three seconds tell me a joke")
        await term.wait_for("I will tell you one.", after=at)
        await term.wait_for(
            "⏰ Scheduled task: Tell me a joke", "Why did the **chicken** cross the road?", after=at
        )
        assert llm.requests[-1]["messages"][-1]["content"].endswith("Tell me a joke")
        assert await term.quit() == 0


async def test_files_of_a_code_run_are_saved_to_the_named_folder(tmp_path: Path, llm: FakeLLM) -> None:
    folder = tmp_path / "charts"
    code = f"open('out/plot.png', 'wb').write({PNG!r})\nprint('drawn')"
    run = tool_calls(call("code", {"action": "execute", "code": code}))
    llm.script(run, text("Here is your plot."), run, text("And again."))
    async with terminal(tmp_path, llm, "--out", str(folder)) as term:
        assert f"saved to {folder}" in term.out
        shown = await term.ask("plot it", "Here is your plot.")
        assert f"[file saved: {folder / 'plot.png'}]" in shown
        assert (folder / "plot.png").read_bytes() == PNG
        shown = await term.ask("plot it again", "And again.")
        assert f"[file saved: {folder / 'plot-2.png'}]" in shown  # the first one is not overwritten
        assert (folder / "plot.png").read_bytes() == PNG and (folder / "plot-2.png").read_bytes() == PNG
        assert await term.quit() == 0


async def test_the_default_folder_is_under_the_data_dir(tmp_path: Path, llm: FakeLLM) -> None:
    async with terminal(tmp_path, llm) as term:
        assert f"saved to {tmp_path / 'data' / 'terminal-out'}." in term.out
        assert await term.quit() == 0


async def test_stop_and_ctrl_c_stop_the_answer_and_the_chat_goes_on(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script(hang(120, partial="Let me think"), hang(120, partial="Thinking again"), text("Back again."))
    async with terminal(tmp_path, llm) as term:
        at = await term.send("a long question")
        await term.wait_for("Let me think", after=at)
        await term.send("/stop")  # typed while the answer is written
        await term.wait_for("(stopped)", after=at)

        at = await term.send("another long one")
        await term.wait_for("Thinking again", after=at)
        term.proc.send_signal(signal.SIGINT)  # Ctrl-C
        await term.wait_for("(stopped)", after=at)

        await term.ask("are you there?", "Back again.")
        users = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "user"]
        assert users == ["a long question", "another long one", "are you there?"]  # nothing was lost
        term.proc.send_signal(signal.SIGINT)  # Ctrl-C at the prompt leaves
        assert await term.exit_code() == 0


async def test_a_call_that_needs_approval_is_asked_about_in_the_terminal(
    tmp_path: Path, llm: FakeLLM
) -> None:
    """Issue 31 §17: with APPROVE_TOOLS set, the terminal chat answered "cannot be asked for here"."""
    question = "Run it? [y]es / [n]o / [a]lways: "
    listing = tool_calls(call("schedule", {"action": "list"}))
    llm.script(listing, text("Listed."), listing, text("Not listed."), listing, text("Listed again."))
    llm.script(listing, text("Listed unasked."))

    def result(request: int) -> str:
        return str(next(m for m in llm.requests[request]["messages"][::-1] if m["role"] == "tool")["content"])

    async with terminal(tmp_path, llm, APPROVE_TOOLS="schedule") as term:
        at = await term.send("what is planned?")
        asked = await term.wait_for(question, after=at)
        assert 'May I run schedule?\n  action: "list"\n' + question in asked
        at = await term.send("maybe")  # not an answer: asked again, nothing decided
        await term.wait_for(f"Please answer y, n or always. {question}", after=at)
        at = await term.send("y")
        await term.wait_for("Approved.", "Listed.", after=at)
        await term.ready()
        assert '"ok": true' in result(1)

        at = await term.send("and now?")
        await term.wait_for(question, after=at)
        at = await term.send("n")
        await term.wait_for("Denied: not run.", "Not listed.", after=at)
        await term.ready()
        assert "denied by the user" in result(3)

        at = await term.send("once more")
        await term.wait_for(question, after=at)
        at = await term.send("always")
        await term.wait_for("Approved, and not asked again in this chat.", "Listed again.", after=at)
        await term.ready()
        shown = await term.ask("and again", "Listed unasked.")  # not asked again
        assert "May I run" not in shown and '"ok": true' in result(7)
        assert await term.quit() == 0
    assert "Traceback" not in term.errors()
