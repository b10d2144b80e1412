"""The terminal chat's approval prompt (issue 31 §17): a call that needs the user's yes (APPROVE_TOOLS, an MCP
server's `confirm`) is shown in full on the terminal, and the next line typed decides it: y, n or always.

The decision is written to the approvals table as a button press is (db/approvals.py), so the gate
(core_tools/approval/gate.py) and the log see the same thing as in Telegram.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Protocol

from core_tools.aio import settled
from core_tools.approval import ApprovalRequest
from db.approvals import Approvals

# A typed answer: the decision stored, whether the chat allows the tool from now on, what is shown.
ANSWERS = {
    "y": ("approved", False, "Approved."),
    "yes": ("approved", False, "Approved."),
    "n": ("denied", False, "Denied: not run."),
    "no": ("denied", False, "Denied: not run."),
    "a": ("approved", True, "Approved, and not asked again in this chat."),
    "always": ("approved", True, "Approved, and not asked again in this chat."),
}
QUESTION = "Run it? [y]es / [n]o / [a]lways: "
ENDED = {"timeout": "No answer in time: not run.", "cancelled": "Stopped: not run."}


class Screen(Protocol):
    """What the asker needs of the terminal's console (bot/terminal/chat.py)."""

    def question(self, text: str) -> None: ...

    def decided(self, text: str) -> None: ...

    def notice(self, text: str) -> None: ...


class TerminalAsker:
    """The gate's Asker for the terminal: asks on the screen and waits for the line that answers."""

    def __init__(self, store: Approvals, screen: Screen, timeout_s: float) -> None:
        self.store = store
        self.screen = screen
        self.timeout_s = timeout_s
        self._answer: asyncio.Future[str] | None = None

    @property
    def waiting(self) -> bool:
        """Whether a call waits for the user's answer: the next line typed is that answer."""
        return self._answer is not None and not self._answer.done()

    def typed(self, line: str | None) -> None:
        """A line typed while a call waits: y, n or always decide it, anything else asks again; the end of
        the input is a no."""
        answer = self._answer
        if answer is None or answer.done():
            return
        word = "n" if line is None else line.strip().lower()
        if word in ANSWERS:
            answer.set_result(word)
        else:
            self.screen.question(f"Please answer y, n or always. {QUESTION}")

    async def _db(self, call: Callable[[], object]) -> object:
        return await settled(call, off_loop=self.store.over_network)

    async def ask(self, request: ApprovalRequest) -> int | None:
        """Show the call and wait (up to the gate's timeout) for the answer, which is stored as a press is."""
        shown = "\n".join(f"  {line}" for line in request.summary.split("\n"))
        self.screen.question(f"May I run {request.tool}?\n{shown}\n{QUESTION}")
        self._answer = answer = asyncio.get_running_loop().create_future()
        try:
            word = await asyncio.wait_for(answer, self.timeout_s)
        except TimeoutError:
            await self._db(lambda: self.store.decide(request.id, "timeout", None))
            return None
        finally:
            self._answer = None
        status, always, said = ANSWERS[word]
        await self._db(lambda: self.store.decide(request.id, status, request.user_id, always=always))
        self.screen.decided(said)
        return None

    async def settled(self, request: ApprovalRequest, message_id: int | None, status: str) -> None:
        """The call ended without an answer (no answer in time, /stop)."""
        self.screen.decided(ENDED.get(status, f"{status}: not run."))

    async def tell(self, chat_id: int, text: str) -> None:
        """A scheduled task's call that could not be asked about."""
        self.screen.notice(text)
