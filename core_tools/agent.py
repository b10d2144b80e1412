"""The turn loop: history from the database, the LLM with tools, concurrent tool calls, all persisted."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import partial
from typing import Any, Protocol, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from core_tools.aio import settled
from core_tools.approval import ApprovalGate
from core_tools.errors import BudgetExceeded
from core_tools.llm import LLMClient, estimate_tokens
from core_tools.media import MediaService
from core_tools.prompts import FINAL_ANSWER_NOTES, system_prompt
from core_tools.registry import ToolRegistry
from core_tools.turn_info import CostOf, PromptSection, TurnTally
from core_tools.types import (
    ChatMessage,
    LLMReply,
    ToolCallRequest,
    ToolContext,
    ToolOutcome,
    chat_type_of,
    is_private,
)
from db.conversation_records import Answer, StoredMessage, TurnClosing, TurnOpening
from db.conversations import Conversations
from db.runtime import TurnMark
from db.usage import LLMCallRecord

log = logging.getLogger(__name__)

T = TypeVar("T")


class TurnSink(Protocol):
    """Where a turn shows its progress (a Telegram message being edited, a terminal, a test)."""

    async def text(self, partial: str) -> None:
        """The answer so far (the whole text, not a delta)."""

    async def status(self, line: str) -> None:
        """A one-line status such as "running code..."; renewed while a long tool works (a code run: about
        every second, with its elapsed time and last line of output), so a sink shows only the latest."""


class TurnBudget(Protocol):
    """Usage caps as the turn loop sees them (core_tools.usage.UsageService in the app)."""

    def check(self, user_id: int | None, purpose: str = "chat") -> None:
        """Raise BudgetExceeded when the user may not start a request."""

    def over_budget(self, user_id: int) -> str | None:
        """Why the user is over a cap, or None; asked before each further tool round."""

    def turn_stopped(self, user_id: int, session_id: str, reason: str) -> None:
        """Count a turn whose tool use was stopped (chain_limit, repeat_guard, budget)."""


class ContextProvider(Protocol):
    """Adds a section to the system prompt for a turn (memories, for example); a PromptSection also says
    which memories it put there (the turn's "why this answer")."""

    async def __call__(self, user_id: int, session_id: str, message: str) -> str | PromptSection: ...


@dataclass
class AgentConfig:
    """Bounds of a turn."""

    max_tool_rounds: int = 8
    history_token_budget: int = 8000
    history_max_messages: int = 200  # rows read per request; the token budget usually binds first
    turn_timeout_s: float = 300.0
    default_timezone: str = "UTC"
    # Tools that read or change the user's private data: not offered, and refused, outside private chats.
    private_tools: frozenset[str] = frozenset({"memory"})


@dataclass
class TurnResult:
    """What a turn produced."""

    text: str
    # "chain_limit" | "repeat_guard" when loop protection ended tool use, "budget" when a usage cap did
    stopped_by: str | None = None
    tool_calls: int = 0
    outcomes: list[ToolOutcome] = field(default_factory=list)
    # Images were left out because the model cannot see them (LLM_VISION=off, or auto after a refusal).
    images_dropped: bool = False
    # The stored answer's message id (the key of its "why this answer" record), None when none was stored.
    answer_id: int | None = None


@dataclass
class TurnControl:
    """Shared between a running turn and its front end: how to stop it, what it stored, what it showed."""

    stop_requested: bool = False
    message_ids: list[int] = field(default_factory=list)  # the turn's user messages
    partial: str = ""  # the answer text streamed so far
    # Awaited after each model reply, before it is stored or its tools run: the front end raises
    # CancelledError there when the turn must not go on (bot/runtime/runner.py: its chat went to another
    # process).
    checkpoint: Callable[[], Awaitable[None]] | None = None
    handed_over: bool = False  # cancelled because another process owns the turn's messages now
    # The turn as published on its chat's lease (bot/runtime): stored with the turn's messages and cleared
    # with its outcome, in the same transactions. `published` while the lease still shows it.
    mark: TurnMark | None = None
    published: bool = False
    # The turn's time limit, suspended while calls wait for the user's approval (`suspend_limit`).
    limit: asyncio.Timeout | None = None
    _waiting: int = 0  # calls waiting for approval now
    _left_s: float | None = None  # what was left of the time limit when the first of them began

    def suspend_limit(self) -> None:
        """A call begins waiting for the user: the turn's time limit stops running until none waits."""
        self._waiting += 1
        limit = self.limit
        if self._waiting != 1 or limit is None or limit.expired():
            return
        when = limit.when()
        if when is not None:
            self._left_s = when - asyncio.get_running_loop().time()
            limit.reschedule(None)

    def resume_limit(self) -> None:
        """A call ended its wait: the time limit runs again (with what was left) once none waits."""
        self._waiting -= 1
        limit, left = self.limit, self._left_s
        if self._waiting == 0 and limit is not None and left is not None:
            self._left_s = None
            if not limit.expired():
                limit.reschedule(asyncio.get_running_loop().time() + left)


@dataclass(frozen=True)
class TurnInput:
    """Who is asking, where, and what."""

    user_id: int
    chat_id: int
    text: str
    first_name: str | None = None
    username: str | None = None
    # ChatType value; None when unknown, which counts as private only in the user's own chat id.
    chat_type: str | None = None
    tg_message_id: int | None = None  # Telegram's id of the message, so an edit can find it
    # Further messages of a burst answered in this same turn: (text, Telegram id), each stored on its own.
    more: tuple[tuple[str, int | None], ...] = ()
    # Answer this stored user message again (/retry, an edit) instead of storing `text` as a new one;
    # its previous answer is kept but superseded (left out of the history).
    rerun_of: int | None = None
    model: str | None = None  # the chat's model; None: the LLM client's default
    inbox_ids: tuple[int, ...] = ()  # where the messages waited (db/runtime/inbox.py): taken out when stored

    @property
    def all_text(self) -> str:
        """Every message of the turn, in order (for memory recall and tool context)."""
        return "\n\n".join([self.text, *(t for t, _ in self.more)])

    # What the turn's LLM requests are accounted as ("scheduled" for a scheduled task's turn).
    purpose: str = "chat"
    # Rows of media_files (voice, photos, documents) that came with this message, linked once it is stored.
    media_ids: tuple[int, ...] = ()
    more_media: tuple[tuple[int, ...], ...] = ()  # the same for each message of `more`, in order

    @property
    def kind(self) -> str:
        """The chat type, resolved (see chat_type_of)."""
        return chat_type_of(self.user_id, self.chat_id, self.chat_type)

    @property
    def private(self) -> bool:
        """Whether the turn is in the user's private chat, where their memories may be used."""
        return is_private(self.kind, self.user_id, self.chat_id)


def _to_chat(m: StoredMessage, images: Mapping[int, tuple[str, ...]] | None = None) -> ChatMessage:
    calls = tuple(ToolCallRequest(c["id"], c["name"], c["arguments"]) for c in m.tool_calls or [])
    pictures = images.get(m.id, ()) if images and m.role == "user" else ()
    return ChatMessage(m.role, m.content, calls, m.tool_call_id, m.tool_name, pictures)


# Under a tight budget each tool result keeps at least its head (where a page's title or an error is); fewer
# characters when a round holds so many results that even this much would not fit.
MIN_RESULT_CHARS = 400
FLOOR_RESULT_CHARS = 80
CHARS_PER_TOKEN = 4  # the same rough ratio as estimate_tokens


def _cost(m: StoredMessage) -> int:
    return estimate_tokens((m.content or "") + json.dumps(m.tool_calls or [])) + 4


def cut_result(content: str, keep: int) -> str:
    """The first `keep` characters of a tool result with a mark saying how much was cut."""
    if len(content) <= keep:
        return content
    return f"{content[:keep]}\n[cut: {keep} of {len(content)} characters]"


def _shrunk(unit: list[StoredMessage], keep: int) -> list[StoredMessage]:
    return [replace(m, content=cut_result(m.content or "", keep)) if m.role == "tool" else m for m in unit]


def _share(sizes: list[int], allowed: int, floor: int) -> int:
    """The largest per-result cap (at least `floor`) with which the results fit in `allowed` characters."""
    if sum(sizes) <= allowed:
        return max(sizes, default=0)
    low, high = floor, max(sizes)
    while low < high:  # binary search on the cap: sum(min(size, cap)) grows with the cap
        mid = (low + high + 1) // 2
        if sum(min(s, mid) for s in sizes) <= allowed:
            low = mid
        else:
            high = mid - 1
    return low


def _units(stored: Sequence[StoredMessage]) -> list[list[StoredMessage]]:
    """Messages grouped so that an assistant tool call and its results are one unit."""
    units: list[list[StoredMessage]] = []
    # An answer replaced by /retry or an edit stays in the database but is not part of the conversation.
    stored = [m for m in stored if m.status != "superseded"]
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
    return units


def _fit_current_turn(units: list[list[StoredMessage]], token_budget: int) -> list[list[StoredMessage]]:
    """The current turn whole, its tool results shrunk to the budget: oldest round first, one round's
    results sharing equally. The question and every call with its result stay, even over the budget."""
    fixed = sum(_cost(m) for unit in units for m in unit if m.role != "tool")
    rounds = [[len(m.content or "") for m in unit if m.role == "tool"] for unit in units]
    n_results = sum(len(r) for r in rounds)
    if not n_results:
        return units
    available = max(0, token_budget - fixed - 4 * n_results) * CHARS_PER_TOKEN
    floor = max(FLOOR_RESULT_CHARS, min(MIN_RESULT_CHARS, available // n_results))
    total = sum(sum(r) for r in rounds)
    out: list[list[StoredMessage]] = []
    for unit, sizes in zip(units, rounds, strict=True):
        excess = total - available
        if not sizes or excess <= 0:
            out.append(unit)
            continue
        cap = _share(sizes, max(0, sum(sizes) - excess), floor)
        shrunk = _shrunk(unit, cap)
        total -= sum(sizes) - sum(min(s, cap) for s in sizes)
        out.append(shrunk)
    return out


def build_history(
    stored: Sequence[StoredMessage],
    token_budget: int,
    current_id: int | None = None,
    images: Mapping[int, tuple[str, ...]] | None = None,
) -> list[ChatMessage]:
    """The conversation within the budget: the current turn always, then older messages newest first.

    The current turn (from the user message `current_id`, or the last user message) always goes in whole,
    its tool results cut to fit (`cut_result`). Older messages are dropped oldest first; an older tool
    round that does not fit is kept with its results cut short before it is dropped. A tool call is never
    split from its results; an assistant message whose results are incomplete (a turn cut by a crash) is
    dropped with its partial results: the API rejects a tool call without a result.
    """
    units = _units(stored)
    starts = [k for k, u in enumerate(units) if u[0].role == "user"]
    current = next((k for k in starts if units[k][0].id == current_id), starts[-1] if starts else len(units))
    tail = _fit_current_turn(units[current:], token_budget)
    used = sum(_cost(m) for unit in tail for m in unit)
    kept: list[list[StoredMessage]] = []
    for unit in reversed(units[:current]):
        cost = sum(_cost(m) for m in unit)
        if used + cost > token_budget and len(unit) > 1:
            unit = _shrunk(unit, MIN_RESULT_CHARS)
            cost = sum(_cost(m) for m in unit)
        if used + cost > token_budget:
            break
        kept.append(unit)
        used += cost
    older = [_to_chat(m, images) for unit in reversed(kept) for m in unit]
    # A history must not start with tool results or an assistant tool call cut from its user message.
    while older and older[0].role != "user":
        older.pop(0)
    return older + [_to_chat(m, images) for unit in tail for m in unit]


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
        private_context_providers: Sequence[ContextProvider] = (),
        media: MediaService | None = None,
        cost_of: CostOf | None = None,
        approvals: ApprovalGate | None = None,
    ) -> None:
        self.media = media
        self.approvals = approvals  # asks the user before the calls that need it (APPROVE_TOOLS)
        self.cost_of = cost_of  # USD of an LLM request, for a turn's record (None: cost unknown)
        self.llm = llm
        self.registry = registry
        self.conversations = conversations
        self.config = config or AgentConfig()
        self.context_providers = list(context_providers)
        # Sections built from the user's private data (memories): used in private chats only.
        self.private_context_providers = list(private_context_providers)
        self.clock = clock
        self.budget = budget

    def _timezone(self, user_id: int) -> tuple[ZoneInfo, str]:
        name = self.conversations.user_timezone(user_id) or self.config.default_timezone
        try:
            return ZoneInfo(name), name
        except (ZoneInfoNotFoundError, ValueError):
            return ZoneInfo("UTC"), "UTC"

    async def _system(self, turn: TurnInput, session_id: str, tally: TurnTally) -> ChatMessage:
        tz, tz_name = self._timezone(turn.user_id)
        sections: list[str] = []
        providers = self.context_providers + (self.private_context_providers if turn.private else [])
        for provider in providers:
            try:
                section = await provider(turn.user_id, session_id, turn.all_text)
            except Exception:  # context is a bonus: a failing provider must not stop the turn
                log.exception("context provider failed")
                continue
            if isinstance(section, PromptSection):
                tally.add_memories(section.memories)
                section = section.text
            sections.append(section)
        return ChatMessage("system", system_prompt(self.clock().astimezone(tz), tz_name, sections))

    async def run_turn(
        self, turn: TurnInput, sink: TurnSink, control: TurnControl | None = None
    ) -> TurnResult:
        """Answer one user message (or a burst of them); raises LLMUnavailable or TimeoutError (the
        messages stay stored).

        Raises BudgetExceeded, before any LLM request, when the user is over a usage cap; the message is
        kept as "refused" and is part of the conversation the model sees once the cap resets. Cancelled
        after `control.stop_requested` was set (the user's stop), it keeps the partial answer, stores the
        turn as "stopped" and returns it with stopped_by="user" instead of raising.
        """
        control = control or TurnControl()
        # Stored before any LLM call, in one transaction with the user and session they need and the turn's
        # mark on its chat's lease: a crash, an LLM failure or a usage cap loses nothing the user wrote.
        opening = TurnOpening(
            turn.user_id,
            turn.chat_id,
            turn.kind,
            texts=((turn.text, turn.tg_message_id), *turn.more),
            inbox_ids=turn.inbox_ids,
            rerun_of=turn.rerun_of,
            first_name=turn.first_name,
            username=turn.username,
            mark=control.mark,
        )
        opened = await self._db(lambda: self.conversations.open_turn(opening))
        control.published = control.mark is not None
        session, ids = opened.session, opened.message_ids
        if self.media is not None:
            for media_ids, msg_id in zip((turn.media_ids, *turn.more_media), ids, strict=False):
                if media_ids:
                    self.media.link(media_ids, msg_id, session.id)
        control.message_ids = ids
        if self.budget is not None:
            try:
                self.budget.check(turn.user_id, turn.purpose)
            except BudgetExceeded:
                await self._close(turn, session.id, ids, control, "refused")
                raise
        try:
            async with asyncio.timeout(self.config.turn_timeout_s) as control.limit:
                return await self._loop(turn, session.id, ids, sink, control)
        except asyncio.CancelledError:
            if not control.stop_requested:  # shutdown mid-turn: the next start tells the user
                if not control.handed_over:  # else the process that took the chat over tells the user
                    await self._close(turn, session.id, ids, control, "interrupted")
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # the stop is handled here: the caller gets the partial answer
            return await self._stopped(turn, session.id, ids, control)
        except BaseException:  # LLMUnavailable, TimeoutError, bugs: the bot tells the user
            await self._close(turn, session.id, ids, control, "failed")
            raise

    async def _db(self, call: Callable[[], T]) -> T:
        """A database call of the turn: off the event loop where it waits on a server (core_tools.aio)."""
        return await settled(call, off_loop=self.conversations.over_network)

    async def _close(
        self,
        turn: TurnInput,
        session_id: str,
        ids: list[int],
        control: TurnControl,
        status: str,
        answer: Answer | None = None,
        llm_call: LLMCallRecord | None = None,
        tally: TurnTally | None = None,
    ) -> int | None:
        """Store how the turn ended (its user messages' status, its last answer with that answer's usage
        and the turn's record) and clear its mark from the chat's lease, in one transaction; returns the
        answer's id."""
        mark = control.mark if control.published else None
        info = tally.record(turn.user_id, turn.chat_id, ids[0]) if tally is not None and ids else None
        closing = TurnClosing(
            session_id, turn.user_id, turn.chat_id, tuple(ids), status, answer, llm_call, mark, info
        )
        answer_id = await self._db(lambda: self.conversations.close_turn(closing))
        control.published = False
        return answer_id

    async def _stopped(
        self, turn: TurnInput, session_id: str, ids: list[int], control: TurnControl
    ) -> TurnResult:
        """Store a turn the user stopped: its partial answer (marked) and the status "stopped"."""
        partial = control.partial.strip()
        answer = Answer(f"{partial}\n\n[stopped by the user]", "stopped") if partial else None
        await self._close(turn, session_id, ids, control, "stopped", answer)
        log.info("chat %s: turn stopped by the user", turn.chat_id)
        return TurnResult(text=partial, stopped_by="user")

    def record_only(self, turn: TurnInput, status: str) -> int:
        """Store a user message that gets no LLM turn (a file that could not be read, a sticker...)."""
        conv = self.conversations
        conv.ensure_user(turn.user_id, turn.first_name, turn.username)
        session = conv.current_session(turn.user_id, turn.chat_id, chat_type=turn.kind)
        msg_id = conv.add_message(session.id, turn.user_id, turn.chat_id, "user", turn.text, status=status)
        if self.media is not None and turn.media_ids:
            self.media.link(turn.media_ids, msg_id, session.id)
        return msg_id

    async def _history(self, session_id: str, user_msg_id: int) -> list[ChatMessage]:
        limit = self.config.history_max_messages
        stored = await self._db(
            lambda: self.conversations.messages(session_id, limit=limit, since_id=user_msg_id)
        )
        budget = self.config.history_token_budget
        images: dict[int, tuple[str, ...]] = {}
        media = self.media
        if media is not None:
            # Images take at most half of the history budget; older ones keep their text stand-ins.
            users = [m.id for m in stored if m.role == "user"]
            images = await self._db(lambda: media.images_for(session_id, users, budget // 2))
            budget -= sum(len(v) for v in images.values()) * media.config.image_tokens
        return build_history(stored, budget, current_id=user_msg_id, images=images)

    def _tool_schemas(self, turn: TurnInput) -> list[dict[str, Any]] | None:
        schemas = self.registry.schemas_for(turn.user_id)
        if not turn.private:
            hidden = self.config.private_tools
            schemas = [s for s in schemas if s.get("function", {}).get("name") not in hidden]
        return schemas or None

    async def _loop(
        self, turn: TurnInput, session_id: str, ids: list[int], sink: TurnSink, control: TurnControl
    ) -> TurnResult:
        conv = self.conversations
        user_msg_id = ids[0]
        tally = TurnTally(self.cost_of)
        system = await self._system(turn, session_id, tally)

        async def on_delta(partial: str) -> None:
            control.partial = partial  # what a stop keeps
            await sink.text(partial)

        result = TurnResult(text="")
        seen: set[str] = set()
        texts: list[str] = []
        rounds = 0
        while True:
            # A cap crossed mid-turn: the tools of the step already paid for ran; now only a final answer.
            if rounds and result.stopped_by is None and self._over_budget(turn.user_id):
                result.stopped_by = "budget"
            history = await self._history(session_id, user_msg_id)
            final_round = result.stopped_by is not None
            messages = [system, *history]
            if final_round:
                messages.append(ChatMessage("system", FINAL_ANSWER_NOTES[result.stopped_by or "chain_limit"]))
            reply: LLMReply = await self.llm.complete(
                messages,
                tools=None if final_round else self._tool_schemas(turn),
                on_delta=on_delta,
                purpose="final" if final_round else turn.purpose,
                user_id=turn.user_id,
                session_id=session_id,
                model=turn.model,
                defer_record=True,  # stored with the reply below, in one transaction
            )
            usage = reply.unrecorded
            tally.add_call(usage.record if usage is not None else None, turn.model or self.llm.model)
            try:
                if control.checkpoint is not None:
                    await control.checkpoint()
                result.images_dropped = result.images_dropped or reply.images_dropped
                calls = [] if final_round else reply.tool_calls
                if reply.content.strip():
                    texts.append(reply.content)
                record = usage.record if usage is not None else None
                if not calls:  # the answer: stored with its usage and the turn's end
                    result.text = texts[-1] if texts else ""
                    answer = Answer(reply.content or None)
                    result.answer_id = await self._close(
                        turn, session_id, ids, control, "answered", answer, record, tally
                    )
                    if usage is not None:
                        usage.stored()
                    break
                asked = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in calls]
                store = partial(
                    conv.add_message,
                    session_id,
                    turn.user_id,
                    turn.chat_id,
                    "assistant",
                    reply.content or None,
                    tool_calls=asked,
                    llm_call=record,
                )
                await self._db(store)
                if usage is not None:
                    usage.stored()
            finally:
                if usage is not None:  # not stored with the reply (the turn stopped here): alone
                    usage.store_alone()
            outcomes = await self._run_calls(
                turn, session_id, user_msg_id, reply, calls, seen, sink, tally, control
            )
            tally.add_tools(calls, outcomes)
            result.tool_calls += len(calls)
            result.outcomes.extend(outcomes)
            rounds += 1
            if all(o.error and o.error.startswith("repeated call") for o in outcomes):
                result.stopped_by = "repeat_guard"
            elif rounds >= self.config.max_tool_rounds:
                result.stopped_by = "chain_limit"
        if result.stopped_by is not None and self.budget is not None:
            self.budget.turn_stopped(turn.user_id, session_id, result.stopped_by)
        return result

    async def _approval(self, turn: TurnInput, call: ToolCallRequest, control: TurnControl) -> str | None:
        """None when the call may run (after the user's yes, if it needs one), else why not. The turn's time
        limit is suspended while its calls wait for the user: deciding may take longer than answering."""
        gate = self.approvals
        tool = self.registry.get(call.name)
        if gate is None or not gate.policy.needs(call.name, tool):
            return None
        control.suspend_limit()
        try:
            return await gate.check(
                call, tool, chat_id=turn.chat_id, user_id=turn.user_id, purpose=turn.purpose
            )
        finally:
            control.resume_limit()

    def _over_budget(self, user_id: int) -> bool:
        return self.budget is not None and self.budget.over_budget(user_id) is not None

    async def _run_calls(
        self,
        turn: TurnInput,
        session_id: str,
        user_msg_id: int,
        reply: LLMReply,
        calls: list[ToolCallRequest],
        seen: set[str],
        sink: TurnSink,
        tally: TurnTally,
        control: TurnControl,
    ) -> list[ToolOutcome]:
        ctx = ToolContext(
            user_id=turn.user_id,
            chat_id=turn.chat_id,
            session_id=session_id,
            trigger_message=turn.all_text,
            reasoning=reply.content or None,
            progress=sink.status,
            chat_type=turn.kind,
            turn_id=user_msg_id,
            recalled=tally.add_views,  # memories the memory tool brings in: the turn's "why this answer"
        )

        async def one(call: ToolCallRequest) -> ToolOutcome:
            if call.name in self.config.private_tools and not turn.private:
                err = (
                    f"the {call.name} tool is not available in group chats: the user's memories are "
                    "private; answer without them, or ask the user to talk to you in a private chat"
                )
                return ToolOutcome(call.id, call.name, False, json.dumps({"ok": False, "error": err}), 0, err)
            key = _call_key(call)
            if key in seen:
                err = "repeated call: this exact call was already made in this turn; use its earlier result"
                return ToolOutcome(call.id, call.name, False, json.dumps({"ok": False, "error": err}), 0, err)
            seen.add(key)
            refusal = await self._approval(turn, call, control)
            if refusal is not None:
                return ToolOutcome(
                    call.id, call.name, False, json.dumps({"ok": False, "error": refusal}), 0, refusal
                )
            return await self.registry.call(call, ctx)

        # Concurrent, and gather keeps the order of the calls for the results.
        outcomes = list(await asyncio.gather(*(one(c) for c in calls)))
        results = [(o.content, o.call_id, o.name) for o in outcomes]
        await self._db(
            lambda: self.conversations.add_tool_results(session_id, turn.user_id, turn.chat_id, results)
        )
        return outcomes
