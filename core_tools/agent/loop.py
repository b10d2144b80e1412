"""The turn loop: history from the database, the LLM with tools, concurrent tool calls, all persisted."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from core_tools.agent.history import build_history
from core_tools.agent.turn import (
    AgentConfig,
    PromptContext,
    TurnBudget,
    TurnControl,
    TurnInput,
    TurnObserver,
    TurnResult,
    TurnSink,
)
from core_tools.aio import settled
from core_tools.approval import ApprovalGate
from core_tools.errors import BudgetExceeded
from core_tools.guest import GUEST_NOTE
from core_tools.guest import refusal as guest_refusal
from core_tools.llm import ChatModel
from core_tools.media import MediaService
from core_tools.prompts import FINAL_ANSWER_NOTES, system_prompt
from core_tools.registry import ToolRegistry
from core_tools.turn_info import CostOf, PromptSection, TurnTally
from core_tools.types import ChatMessage, LLMReply, ToolCallRequest, ToolContext, ToolOutcome
from db.conversation_records import Answer, TurnClosing, TurnOpening
from db.conversations import Conversations
from db.usage import LLMCallRecord

log = logging.getLogger(__name__)

T = TypeVar("T")


class Agent:
    """Runs one chat turn through the LLM tool loop, persisting everything as it happens."""

    def __init__(
        self,
        llm: ChatModel,
        registry: ToolRegistry,
        conversations: Conversations,
        config: AgentConfig | None = None,
        context: Sequence[PromptContext] = (),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        budget: TurnBudget | None = None,
        private_context: Sequence[PromptContext] = (),
        private_turn_observers: Sequence[TurnObserver] = (),
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
        # The system prompt's sections: `context` in every chat; `private_context`, built from the user's
        # private data (memories), and the observers of a turn's message (memory extraction) in private
        # chats only: a group's prompt never shows the user's memories, its messages never become them.
        self.context = list(context)
        self.private_context = list(private_context)
        self.private_turn_observers = list(private_turn_observers)
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
        if turn.guest:  # nothing of the user's: not even a summary or a note (core_tools/guest.py)
            return ChatMessage("system", system_prompt(self.clock().astimezone(tz), tz_name, [GUEST_NOTE]))
        sections: list[str] = []
        for context in self.context + (self.private_context if turn.private else []):
            try:
                section = await context.section(turn.user_id, session_id, turn.all_text)
            except Exception:  # context is a bonus: a failing section must not stop the turn
                log.exception("prompt context %s failed", type(context).__name__)
                continue
            if isinstance(section, PromptSection):
                tally.add_memories(section.memories)
                section = section.text
            sections.append(section)
        return ChatMessage("system", system_prompt(self.clock().astimezone(tz), tz_name, sections))

    def _observe(self, turn: TurnInput, session_id: str) -> None:
        """Show a private turn's message to its observers (memory extraction), each on its own."""
        if not turn.private:
            return
        for observer in self.private_turn_observers:
            try:
                observer(turn.user_id, session_id, turn.all_text)
            except Exception:  # like a prompt section: a failing observer must not stop the turn
                log.exception("turn observer failed")

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
        speaker, kind = turn.speaker, turn.kind
        opening = TurnOpening(
            speaker if speaker.chat_type == kind else replace(speaker, chat_type=kind),
            texts=((turn.text, turn.tg_message_id), *turn.more),
            inbox_ids=turn.inbox_ids,
            rerun_of=turn.rerun_of,
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
            if control.folded:  # answered by the chat's next turn, with the message that came meanwhile
                await self._close(turn, session.id, ids, control, "answered")
                raise
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
        conv.ensure_user(turn.user_id, turn.speaker.first_name, turn.speaker.username)
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
        if turn.guest:  # the guest tools only, without the user's notes (a code lessons note is theirs)
            allowed = self.config.guest_tools
            return [s for s in self.registry.schemas() if s["function"]["name"] in allowed] or None
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
        self._observe(turn, session_id)

        async def on_delta(partial: str) -> None:
            control.acted = True
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
            control.acted = True
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
        if turn.guest:  # no chat of the user's to ask in
            return f"{call.name} needs the user's approval, which cannot be asked for in someone else's chat"
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
            if turn.guest and call.name not in self.config.guest_tools:
                err = guest_refusal(call.name)
                return ToolOutcome(call.id, call.name, False, json.dumps({"ok": False, "error": err}), 0, err)
            if call.name in self.config.private_tools and not turn.private:
                err = (
                    f"the {call.name} tool is not available in group chats: the user's memories are "
                    "private; answer without them, or ask the user to talk to you in a private chat"
                )
                return ToolOutcome(call.id, call.name, False, json.dumps({"ok": False, "error": err}), 0, err)
            key = call.repeat_key()
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
