"""The turn loop: history from the database, the LLM with tools, concurrent tool calls, all persisted."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from core_tools.errors import BudgetExceeded
from core_tools.llm import LLMClient, estimate_tokens
from core_tools.prompts import FINAL_ANSWER_NOTES, system_prompt
from core_tools.registry import ToolRegistry
from core_tools.types import ChatMessage, LLMReply, ToolCallRequest, ToolContext, ToolOutcome
from db.conversations import Conversations, StoredMessage

log = logging.getLogger(__name__)


class TurnSink(Protocol):
    """Where a turn shows its progress (a Telegram message being edited, a terminal, a test)."""

    async def text(self, partial: str) -> None:
        """The answer so far (the whole text, not a delta)."""

    async def status(self, line: str) -> None:
        """A one-line status such as "running code..."."""


class TurnBudget(Protocol):
    """Usage caps as the turn loop sees them (core_tools.usage.UsageService in the app)."""

    def check(self, user_id: int | None, purpose: str = "chat") -> None:
        """Raise BudgetExceeded when the user may not start a request."""

    def over_budget(self, user_id: int) -> str | None:
        """Why the user is over a cap, or None; asked before each further tool round."""

    def turn_stopped(self, user_id: int, session_id: str, reason: str) -> None:
        """Count a turn whose tool use was stopped (chain_limit, repeat_guard, budget)."""


class ContextProvider(Protocol):
    """Adds a section to the system prompt for a turn (memories, for example)."""

    async def __call__(self, user_id: int, session_id: str, message: str) -> str: ...


@dataclass
class AgentConfig:
    """Bounds of a turn."""

    max_tool_rounds: int = 8
    history_token_budget: int = 8000
    history_max_messages: int = 200  # rows read per request; the token budget usually binds first
    turn_timeout_s: float = 300.0
    default_timezone: str = "UTC"


@dataclass
class TurnResult:
    """What a turn produced."""

    text: str
    # "chain_limit" | "repeat_guard" when loop protection ended tool use, "budget" when a usage cap did
    stopped_by: str | None = None
    tool_calls: int = 0
    outcomes: list[ToolOutcome] = field(default_factory=list)


@dataclass(frozen=True)
class TurnInput:
    """Who is asking, where, and what."""

    user_id: int
    chat_id: int
    text: str
    first_name: str | None = None
    username: str | None = None


def _to_chat(m: StoredMessage) -> ChatMessage:
    calls = tuple(ToolCallRequest(c["id"], c["name"], c["arguments"]) for c in m.tool_calls or [])
    return ChatMessage(m.role, m.content, calls, m.tool_call_id, m.tool_name)


def build_history(stored: Sequence[StoredMessage], token_budget: int) -> list[ChatMessage]:
    """Newest messages within the budget, oldest dropped first, never splitting a tool call from its result.

    An assistant message whose tool results are incomplete (a turn cut by a crash) is dropped with its
    partial results: the API rejects a tool call without a result.
    """
    units: list[list[StoredMessage]] = []
    i = 0
    while i < len(stored):
        m = stored[i]
        if m.role == "assistant" and m.tool_calls:
            wanted = {c["id"] for c in m.tool_calls}
            group = [m]
            j = i + 1
            while j < len(stored) and stored[j].role == "tool":
                group.append(stored[j])
                j += 1
            got = {g.tool_call_id for g in group[1:]}
            if wanted <= got:
                units.append([g for g in group if g.role == "assistant" or g.tool_call_id in wanted])
            i = j
            continue
        if m.role == "tool":  # orphan result
            i += 1
            continue
        if m.role == "assistant" and not (m.content or "").strip():
            i += 1
            continue
        units.append([m])
        i += 1
    kept: list[list[StoredMessage]] = []
    used = 0
    for unit in reversed(units):
        cost = sum(estimate_tokens((u.content or "") + json.dumps(u.tool_calls or [])) + 4 for u in unit)
        if kept and used + cost > token_budget:
            break
        kept.append(unit)
        used += cost
    out = [_to_chat(m) for unit in reversed(kept) for m in unit]
    # A history must not start with tool results or an assistant tool call cut from its user message.
    while out and out[0].role != "user":
        out.pop(0)
    return out


def _call_key(call: ToolCallRequest) -> str:
    try:
        args = json.dumps(json.loads(call.arguments or "{}"), sort_keys=True)
    except json.JSONDecodeError:
        args = call.arguments
    return f"{call.name}:{args}"


class Agent:
    """Runs one chat turn through the LLM tool loop, persisting everything as it happens."""

    def __init__(
        self,
        llm: LLMClient,
        registry: ToolRegistry,
        conversations: Conversations,
        config: AgentConfig | None = None,
        context_providers: Sequence[ContextProvider] = (),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        budget: TurnBudget | None = None,
    ) -> None:
        self.llm = llm
        self.registry = registry
        self.conversations = conversations
        self.config = config or AgentConfig()
        self.context_providers = list(context_providers)
        self.clock = clock
        self.budget = budget

    def _timezone(self, user_id: int) -> tuple[ZoneInfo, str]:
        name = self.conversations.user_timezone(user_id) or self.config.default_timezone
        try:
            return ZoneInfo(name), name
        except (ZoneInfoNotFoundError, ValueError):
            return ZoneInfo("UTC"), "UTC"

    async def _system(self, turn: TurnInput, session_id: str) -> ChatMessage:
        tz, tz_name = self._timezone(turn.user_id)
        sections: list[str] = []
        for provider in self.context_providers:
            try:
                sections.append(await provider(turn.user_id, session_id, turn.text))
            except Exception:  # context is a bonus: a failing provider must not stop the turn
                log.exception("context provider failed")
        return ChatMessage("system", system_prompt(self.clock().astimezone(tz), tz_name, sections))

    async def run_turn(self, turn: TurnInput, sink: TurnSink) -> TurnResult:
        """Answer one user message; raises LLMUnavailable or TimeoutError (the message stays stored).

        Raises BudgetExceeded, before any LLM request, when the user is over a usage cap; the message is
        kept as "refused" and is part of the conversation the model sees once the cap resets.
        """
        conv = self.conversations
        conv.ensure_user(turn.user_id, turn.first_name, turn.username)
        session = conv.current_session(turn.user_id, turn.chat_id)
        # Stored before any LLM call: a crash, an LLM failure or a usage cap loses nothing the user wrote.
        user_msg_id = conv.add_message(
            session.id, turn.user_id, turn.chat_id, "user", turn.text, status="pending"
        )
        if self.budget is not None:
            try:
                self.budget.check(turn.user_id, "chat")
            except BudgetExceeded:
                conv.set_status(user_msg_id, "refused")
                raise
        try:
            async with asyncio.timeout(self.config.turn_timeout_s):
                result = await self._loop(turn, session.id, sink)
        except asyncio.CancelledError:  # shutdown mid-turn: the next start tells the user
            conv.set_status(user_msg_id, "interrupted")
            raise
        except BaseException:  # LLMUnavailable, TimeoutError, bugs: the bot tells the user
            conv.set_status(user_msg_id, "failed")
            raise
        conv.set_status(user_msg_id, "answered")
        return result

    async def _loop(self, turn: TurnInput, session_id: str, sink: TurnSink) -> TurnResult:
        conv = self.conversations
        system = await self._system(turn, session_id)
        result = TurnResult(text="")
        seen: set[str] = set()
        texts: list[str] = []
        rounds = 0
        while True:
            # A cap crossed mid-turn: the tools of the step already paid for ran; now only a final answer.
            if rounds and result.stopped_by is None and self._over_budget(turn.user_id):
                result.stopped_by = "budget"
            history = build_history(
                conv.messages(session_id, limit=self.config.history_max_messages),
                self.config.history_token_budget,
            )
            final_round = result.stopped_by is not None
            messages = [system, *history]
            if final_round:
                messages.append(ChatMessage("system", FINAL_ANSWER_NOTES[result.stopped_by or "chain_limit"]))
            reply: LLMReply = await self.llm.complete(
                messages,
                tools=None if final_round or not self.registry.names else self.registry.schemas(),
                on_delta=sink.text,
                purpose="final" if final_round else "chat",
                user_id=turn.user_id,
                session_id=session_id,
            )
            calls = [] if final_round else reply.tool_calls
            conv.add_message(
                session_id,
                turn.user_id,
                turn.chat_id,
                "assistant",
                reply.content or None,
                tool_calls=[{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls] or None,
            )
            if reply.content.strip():
                texts.append(reply.content)
            if not calls:
                break
            outcomes = await self._run_calls(turn, session_id, reply, calls, seen, sink)
            result.tool_calls += len(calls)
            result.outcomes.extend(outcomes)
            rounds += 1
            if all(o.error and o.error.startswith("repeated call") for o in outcomes):
                result.stopped_by = "repeat_guard"
            elif rounds >= self.config.max_tool_rounds:
                result.stopped_by = "chain_limit"
        result.text = texts[-1] if texts else ""
        if result.stopped_by is not None and self.budget is not None:
            self.budget.turn_stopped(turn.user_id, session_id, result.stopped_by)
        return result

    def _over_budget(self, user_id: int) -> bool:
        return self.budget is not None and self.budget.over_budget(user_id) is not None

    async def _run_calls(
        self,
        turn: TurnInput,
        session_id: str,
        reply: LLMReply,
        calls: list[ToolCallRequest],
        seen: set[str],
        sink: TurnSink,
    ) -> list[ToolOutcome]:
        ctx = ToolContext(
            user_id=turn.user_id,
            chat_id=turn.chat_id,
            session_id=session_id,
            trigger_message=turn.text,
            reasoning=reply.content or None,
            progress=sink.status,
        )

        async def one(call: ToolCallRequest) -> ToolOutcome:
            key = _call_key(call)
            if key in seen:
                err = "repeated call: this exact call was already made in this turn; use its earlier result"
                return ToolOutcome(call.id, call.name, False, json.dumps({"ok": False, "error": err}), 0, err)
            seen.add(key)
            return await self.registry.call(call, ctx)

        # Concurrent, and gather keeps the order of the calls for the results.
        outcomes = list(await asyncio.gather(*(one(c) for c in calls)))
        for o in outcomes:
            self.conversations.add_message(
                session_id,
                turn.user_id,
                turn.chat_id,
                "tool",
                o.content,
                tool_call_id=o.call_id,
                tool_name=o.name,
            )
        return outcomes
