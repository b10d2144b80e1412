"""The wait for the user's decision on a tool call.

The request is a row in the database (db/approvals.py); the front end shows it with buttons (`Asker`) and
whichever process receives the press writes the decision there. The waiting turn reads the row until it is
decided, as a /stop reaches a turn in another process (bot/runtime/stops.py): so the decision reaches the
turn wherever it runs. A stopped turn (its task cancelled) marks its request "cancelled".
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Protocol, TypeVar

from core_tools.aio import settled
from core_tools.approval.policy import ApprovalPolicy
from core_tools.approval.summary import MAX_SUMMARY_CHARS, summarize
from core_tools.registry import Tool
from core_tools.types import ToolCallRequest
from db.approvals import PENDING, Approvals

log = logging.getLogger(__name__)

T = TypeVar("T")

DENIED = "denied by the user"
POLL_S = 0.25  # how often a waiting turn reads its request's status (STOP_POLL_S of the replicas)


@dataclass(frozen=True)
class ApprovalRequest:
    """One call waiting for its user's decision, as the front end shows it."""

    id: int
    chat_id: int
    user_id: int  # the only person who may decide: the one whose turn it is
    tool: str
    summary: str


class Asker(Protocol):
    """The front end's side: show a request with its buttons, tell what became of it, tell the user."""

    async def ask(self, request: ApprovalRequest) -> int | None:
        """Show the request with Approve, Deny and Always buttons; the shown message's id, if any."""

    async def settled(self, request: ApprovalRequest, message_id: int | None, status: str) -> None:
        """The request ended without a press ("timeout", "cancelled"): take its buttons away."""

    async def tell(self, chat_id: int, text: str) -> None:
        """A message to the chat (a scheduled task's call that could not be asked about)."""


class ApprovalGate:
    """Decides, before each tool call of a turn, whether it runs: at once, after the user's yes, or not."""

    def __init__(
        self,
        store: Approvals,
        policy: ApprovalPolicy,
        timeout_s: float,
        *,
        secrets: Sequence[str] = (),
        poll_s: float = POLL_S,
    ) -> None:
        self.store = store
        self.policy = policy
        self.timeout_s = timeout_s
        self.secrets = tuple(s for s in secrets if s)
        self.poll_s = poll_s
        self.asker: Asker | None = None  # set once the front end exists (bot/app.py)

    async def _db(self, call: Callable[[], T]) -> T:
        """A database call: off the event loop where it waits on a server."""
        return await settled(call, off_loop=self.store.over_network)

    async def check(
        self,
        call: ToolCallRequest,
        tool: Tool | None,
        *,
        chat_id: int,
        user_id: int,
        purpose: str,
        asker: Asker | None = None,
    ) -> str | None:
        """None when the call may run; otherwise why not, which the model gets as the tool's result.
        Waits (up to `timeout_s`) for the user's decision when the call needs one; `asker` asks instead of
        the front end's (an MCP client, for its own calls)."""
        if not self.policy.needs(call.name, tool):
            return None
        name = call.name
        if await self._db(lambda: self.store.allowed_always(chat_id, name, user_id)):
            return None
        summary = summarize(call.arguments, self.secrets)
        if len(summary) > MAX_SUMMARY_CHARS:  # not cut: what the user approves is what they see
            return (
                f"not run: this call of {name} is too long to show the user for approval "
                f"({len(summary)} characters, at most {MAX_SUMMARY_CHARS}); make it shorter"
            )
        asker = asker or self.asker
        if purpose == "scheduled":
            return await self._unasked(asker, chat_id, name, summary)
        if asker is None:  # a front end without buttons (the terminal chat)
            return f"not run: {name} needs the user's approval, which cannot be asked for here"
        approval_id = await self._db(lambda: self.store.ask(chat_id, user_id, name, summary))
        request = ApprovalRequest(approval_id, chat_id, user_id, name, summary)
        message_id: int | None = None
        status = PENDING
        try:
            try:
                message_id = await asker.ask(request)
            except Exception as exc:  # the user could not be asked (Telegram down): the call does not run
                log.warning("approval %d: could not ask chat %s: %s", approval_id, chat_id, exc)
                return f"{DENIED}: the approval prompt could not be shown ({type(exc).__name__}); not run"
            status = await self._wait(approval_id)
        finally:
            if status == PENDING:  # stopped (cancelled) or the prompt could not be shown
                end = "cancelled"
                with suppress(Exception):
                    await self._db(lambda: self.store.decide(approval_id, end, None))
                log.info("approval %d (%s in chat %s): cancelled", approval_id, name, chat_id)
                with suppress(Exception):
                    await asyncio.shield(asker.settled(request, message_id, end))
        if status == "approved":
            return None
        if status == "timeout":
            with suppress(Exception):
                await asker.settled(request, message_id, status)
            return f"{DENIED}: no answer within {self.timeout_s:g} s; the call was not run"
        return f"{DENIED}: the call was not run; do not try it again unless the user asks"

    async def _wait(self, approval_id: int) -> str:
        """The request's decision; "timeout" (stored) when none came within `timeout_s`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while True:
            status = await self._db(lambda: self.store.status(approval_id))
            if status is not None and status != PENDING:
                return status
            remaining = deadline - loop.time()
            if remaining <= 0:
                if await self._db(lambda: self.store.decide(approval_id, "timeout", None)):
                    log.info("approval %d: no decision within %g s", approval_id, self.timeout_s)
                    return "timeout"
                continue  # decided at the last moment: that decision counts
            await asyncio.sleep(min(self.poll_s, remaining))

    async def _unasked(self, asker: Asker | None, chat_id: int, name: str, summary: str) -> str:
        """A call nobody can be asked about (a scheduled task's): refused, and the user is told."""
        log.info("chat %s: %s needs approval in a scheduled task; not run", chat_id, name)
        if asker is not None:
            try:
                await asker.tell(
                    chat_id,
                    f"A scheduled task wanted to use {name} ({_brief(summary)}), which needs "
                    "your approval. Nobody was there to ask, so it was not run. Ask me directly to do it, "
                    "or choose \u201cAlways in this chat\u201d the next time I ask.",
                )
            except Exception:
                log.exception("could not tell chat %s about a refused scheduled call", chat_id)
        return (
            f"not run: {name} needs the user's approval and a scheduled task has nobody to ask; tell the "
            "user it was not done and that they can ask for it directly"
        )


def _brief(summary: str, limit: int = 300) -> str:
    """A call's summary on one line, cut: the plain message of a refused call (nothing to approve there)."""
    line = ", ".join(part.strip() for part in summary.split("\n") if part.strip())
    return line if len(line) <= limit else line[: limit - 1] + "\u2026"
