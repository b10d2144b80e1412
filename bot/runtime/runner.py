"""The per-chat turn runner: one turn at a time per chat, bursts as one turn, /stop, /retry and edits,
across any number of processes on one database.

A turn reads: take the next batch from the chat's queue, run it, store the outcome. The agent stores the
batch's messages (out of the inbox, into the history) in the transaction that publishes the turn on the
chat's lease, and its answer with the answer's usage in the one that clears it (core_tools/agent/loop.py).

A message that finds its chat idle is answered at once. Until the turn shows anything (the model's first
token), a message the same person sends meanwhile is folded into it: the turn is cancelled unseen, its
messages kept as answered, and the next turn answers them together with the new one, so a burst gets one
answer. Messages that arrive later wait in the inbox and, when the turn ends, go into the next turn
together (one turn each, and no folding, when merging is off). With `debounce_s` (MESSAGE_DEBOUNCE_MS) a
message waits that long for more before its turn starts, as before folding existed.

The inbox is the queue, in Telegram's update order (bot/runtime/queue.py): whichever process holds the
chat's lease (bot/runtime/leases.py) takes its messages, so two processes never answer one chat at once.
The task of the message that found the chat free drives it until its inbox is empty, so the front end still
owns every task (PTB's shutdown cancels them); the turn itself runs in a task of its own that `/stop`
cancels, also when the /stop reached another process (bot/runtime/stops.py). What a turn shows goes to the
front end given at construction (bot/runtime/front.py): the runner knows no Telegram.

A "chat" here is a conversation key (db/topics.py): the chat id, or a forum topic's own key, so each topic
of a forum queues, leases, stops and answers on its own; the front end knows where its messages go.

A process that finds a chat taken over by another one (it was silent past the lease: frozen, starved, cut off
from the database) stops that chat's turn without a word: the other process told the user. Until it knows,
the turn neither shows nor keeps anything (`ChatLeases.confirm` before every message, edit and stored reply).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

from bot.runtime.endings import NOT_YOURS, NOTHING_TO_RETRY, STILL_ANSWERING, interrupted_text
from bot.runtime.front import ChatFront, TurnReply
from bot.runtime.leases import ChatLeases, ChatLocks, Hold
from bot.runtime.queue import ChatQueue, Incoming
from bot.runtime.state import ChatState, QuietSink
from bot.runtime.stops import Running, Stops
from core_tools.agent import Agent, TurnControl, TurnInput, TurnResult
from core_tools.aio import settled, wait_event
from core_tools.code.tool import CodeTool
from db.conversations import Conversations
from db.runtime import RuntimeStore, TurnMark

log = logging.getLogger(__name__)

SETTLE_POLL_S = 0.2  # how often the debounce and the fold look for messages another process stored

T = TypeVar("T")


class TurnRunner:
    """Runs the turns of every chat this process drives: queueing, merging, stopping, re-running.

    A message is stored (with its chat's claim when no holder is here), then the process holding the chat
    drives it until its inbox is empty; a process already driving it (here or elsewhere) takes the message
    in its next turn; a chat left over (no free slot here, a process died) is taken by whichever process
    finds it first (bot/runtime/replica.py)."""

    def __init__(
        self,
        agent: Agent,
        conversations: Conversations,
        code: CodeTool | None,
        chats: ChatLeases,
        front: ChatFront,
        *,
        debounce_s: float = 0.0,
        merge_bursts: bool = True,
        fold_bursts: bool = True,
        model_for: Callable[[int], str | None] = lambda chat_id: None,
        locks: ChatLocks | None = None,
        max_chats: int = 0,
        on_free: Callable[[], None] = lambda: None,
        info_button: Callable[[str], bool] = lambda kind: False,
    ) -> None:
        self.agent = agent
        self.conversations = conversations
        self.code = code
        self.chats = chats
        self.store: RuntimeStore = chats.store
        self.queue = ChatQueue(self.store, conversations.inbox, merge_bursts=merge_bursts)
        self.stops = Stops(self.store, self._running_here)
        self.front = front  # where the chats' turns are shown (bot/runtime/front.py)
        self.debounce_s = debounce_s
        self.fold_bursts = merge_bursts and fold_bursts  # see the module
        self.model_for = model_for
        self.locks = locks or ChatLocks(chats)
        self.max_chats = max_chats  # chats driven at once here (MAX_CONCURRENT_TURNS; 0: no limit)
        self.on_free = on_free  # a slot came free after one was refused: look for chats nobody drives
        # Whether an answer in a chat of this kind (private, group...) carries its "why this answer" button.
        self.info_button = info_button
        self._states: dict[int, ChatState] = {}
        self._typing: dict[int, float] = {}  # inbox id -> when "typing" was shown for it here
        self._refused = False  # a chat was left undriven for want of a slot
        # Users whose data is being erased (`quiet`): their turns wait until it ends; and per user, the turns
        # of theirs running here (from the batch taken to the last write).
        self._quiet: dict[int, asyncio.Event] = {}
        self._active: dict[int, int] = {}
        self._ended = asyncio.Condition()

    # ------------------------------------------------------------------ queueing

    def driving(self) -> int:
        """How many chats this process drives now."""
        return len(self._states)

    def running(self) -> int:
        """How many turns run here now."""
        return sum(1 for s in self._states.values() if s.running is not None)

    def free(self) -> int:
        """How many more chats this process may drive."""
        return 1000 if self.max_chats <= 0 else max(0, self.max_chats - len(self._states))

    async def _db(self, call: Callable[[], T]) -> T:
        """A database call: off the event loop where it waits on a server (core_tools.aio.settled)."""
        return await settled(call, off_loop=self.store.over_network)

    async def busy(self, chat_id: int) -> bool:
        """Whether the chat has a turn running (in any process) or messages waiting."""
        if self._running_here(chat_id) is not None:
            return True
        return await self._db(
            lambda: self.queue.has_waiting(chat_id) or self.store.running(chat_id) is not None
        )

    def _running_here(self, chat_id: int) -> Running | None:
        state = self._states.get(chat_id)
        return state.running if state is not None else None

    async def submit(self, item: Incoming) -> None:
        """Store a message; drive its chat unless a process already does (it takes the message next)."""
        hold: Hold | None = None
        if item.user_id in self._quiet:  # stored only once the erase of the sender's data has ended
            await self._quiet[item.user_id].wait()
        if item.inbox_id is None:
            # In the database before any wait: a restart during the debounce or another turn loses nothing.
            # Its chat is claimed in the same transaction when nothing here holds it. On the event loop, as
            # is the inbox's read below: from a message's arrival to its turn's task nothing else runs here
            # (a /stop right after a message finds its turn).
            claim = (
                item.chat_id not in self._states and not self.chats.holds(item.chat_id) and self.free() > 0
            )
            arrival = self.queue.put(item, claim_for=self.chats.me if claim else None)
            if arrival.inbox_id is None:
                log.info("update %s was already handled; dropped", item.update_id)
                return
            item.inbox_id = arrival.inbox_id
            if arrival.claimed is not None:
                hold = self.chats.adopt(arrival.claimed)
        if item.typing_at is not None:
            self._typing[item.inbox_id] = item.typing_at
        await self.drive(item.chat_id, hold)

    async def drive(self, chat_id: int, hold: Hold | None = None) -> None:
        """Answer what waits in the chat, holding its lease, until nothing does (a no-op when a process
        drives it already, or when this one has no free slot: another process, or a later look, takes it).
        `hold`: the chat was claimed with the message that brought this here."""
        state = self._states.get(chat_id)
        if state is not None:
            state.arrived.set()
            return
        if hold is None:
            if self.free() <= 0:
                self._refused = True
                return
            hold = self.chats.try_take(chat_id)
            if hold is None:
                return
        state = self._states[chat_id] = ChatState(hold)
        try:
            if hold.interrupted:  # a turn still pending in it was cut when its process died
                await self._report_interrupted(hold)
            while not state.lost:
                await self._drive(chat_id, state)
                # No await from the empty inbox to here: a message stored in this process meanwhile is
                # impossible, and one stored by another process keeps the lease (the release checks; a
                # chat taken over meanwhile is let go).
                if state.lost or self.chats.give_back(hold, only_if_idle=True):
                    break
        except BaseException:
            self.chats.give_back(hold)
            raise
        finally:
            del self._states[chat_id]
            if self._refused:  # a slot came free: look for the chats left undriven
                self._refused = False
                self.on_free()

    def lost(self, chat_id: int) -> None:
        """Another process took the chat over (this one was silent past the lease): its turn here stops
        without showing or keeping anything more, and its messages are the other process's now."""
        state = self._states.get(chat_id)
        if state is None or state.lost:
            return
        log.warning("chat %s: taken over by another process; stopping its turn here", chat_id)
        state.lost = True
        state.arrived.set()
        if state.running is not None:
            state.running.control.handed_over = True
            state.running.task.cancel()

    async def _still_mine(self, state: ChatState) -> bool:
        """Whether this process still drives the chat (else its turn stops, see `lost`)."""
        if state.lost:
            return False
        if not await self.chats.confirm(state.hold):
            self.lost(state.hold.chat_id)
        return not state.lost

    async def _report_interrupted(self, hold: Hold) -> None:
        """Tell the chat about messages whose turn a stopped process could not finish."""
        for pending in hold.interrupted:
            await self.front.tell(pending.chat_id, interrupted_text(pending.content))

    async def _drive(self, chat_id: int, state: ChatState) -> None:
        """Take the next batch, run it (the turn stores its outcome), until the chat's queue is empty."""
        first = True
        while (batch := await self._next_batch(chat_id, state, first)) is not None:
            first = False
            user_id = batch[0].user_id
            if user_id in self._quiet:  # their data is being erased (its inbox rows too): look again after
                await self._quiet[user_id].wait()
                continue
            self._active[user_id] = self._active.get(user_id, 0) + 1
            try:
                async with self.locks.hold(chat_id):
                    await self._run(batch, state)
            finally:
                self._active[user_id] -= 1
                if not self._active[user_id]:
                    del self._active[user_id]
                async with self._ended:
                    self._ended.notify_all()

    async def _next_batch(self, chat_id: int, state: ChatState, first: bool) -> list[Incoming] | None:
        """The messages of the chat's next turn (None: nothing waits, or the chat is lost)."""
        while not state.lost and (rows := self.queue.waiting(chat_id)):
            if first and self.debounce_s > 0 and rows[0].rerun_of is None:
                first = False
                async with self.front.typing(chat_id):  # the user sees the bot is about to answer
                    await self._settle(chat_id, state)
                continue
            again = [q.id for q in rows if (q.id, q.received_at) in state.tried]
            if again:  # a turn took them and could not even store them: do not loop on them
                log.error("chat %s: dropping %d message(s) a turn could not store", chat_id, len(again))
                self.queue.discard(again)
                continue
            batch = self.queue.batch([Incoming.waiting(q) for q in rows])
            taken = {b.inbox_id for b in batch}
            state.tried.update((q.id, q.received_at) for q in rows if q.id in taken)
            for item in batch:
                if item.inbox_id is not None:
                    item.typing_at = self._typing.pop(item.inbox_id, None)
            return batch
        return None

    async def _settle(self, chat_id: int, state: ChatState) -> None:
        """Wait until no message arrived for `debounce_s` (at most four debounces in all), here or in
        another process (its messages are seen in the inbox)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 4 * self.debounce_s
        latest = self.queue.latest(chat_id)
        quiet_until = loop.time() + self.debounce_s
        while True:
            now = loop.time()
            remaining = min(quiet_until, deadline) - now
            if remaining <= 0:
                return
            state.arrived.clear()
            await wait_event(state.arrived, min(remaining, SETTLE_POLL_S))
            newest = self.queue.latest(chat_id)
            if newest != latest or state.arrived.is_set():
                latest = newest
                quiet_until = loop.time() + self.debounce_s

    # ------------------------------------------------------------------ one turn

    async def _run(self, batch: list[Incoming], state: ChatState) -> None:
        head = batch[0]
        folded, state.folded = state.folded, []
        turn = TurnInput(
            head.speaker,
            head.text,
            tg_message_id=head.tg_message_id,
            more=tuple((b.text, b.tg_message_id) for b in batch[1:]),
            rerun_of=head.rerun_of,
            model=self.model_for(head.chat_id),
            inbox_ids=tuple(b.inbox_id for b in batch if b.inbox_id is not None),
            media_ids=head.media_ids,
            more_media=tuple(b.media_ids for b in batch[1:]),
            earlier=tuple(b.text for b in folded),
        )
        number = secrets.randbits(48)  # unique across processes (an inbox id is not: SQLite reuses them)

        async def still_mine() -> bool:
            return await self._still_mine(state)

        async def checkpoint() -> None:
            if not await still_mine():
                raise asyncio.CancelledError  # the turn ends here: nothing more is stored or run

        reply = self.front.reply(head, number, still_mine)
        # The turn is published on the chat's lease (for a /stop another process gets) in the transaction
        # that stores its messages, and cleared in the one that stores its outcome.
        mark = TurnMark(head.chat_id, self.chats.me, number, head.user_id)
        control = TurnControl(checkpoint=checkpoint, mark=mark)
        task = asyncio.create_task(self.agent.run_turn(turn, reply, control))
        running = state.running = Running(number, head.user_id, control, task)
        try:
            async with self.front.typing(head.chat_id, head.typing_at):
                await self._watch(task, control, reply, state, head)
            if control.stop_requested and self.code is not None and control.message_ids:
                await self.code.cancel_turn(control.message_ids[0])  # its background jobs stop too
        except asyncio.CancelledError:  # shutdown: the turn goes with the handler (stored as interrupted)
            task.cancel()
            await asyncio.wait({task})
            raise
        finally:
            state.running = None
            running.released.set()
            if control.published:  # its outcome was not stored (or it was handed over): cleared here
                await self._db(lambda: self.store.end_turn(head.chat_id, self.chats.me, number))
        if state.lost or not await self._still_mine(state):
            return  # taken over: the other process told the user, and answers what waits
        if control.folded:
            if task.cancelled() and control.message_ids:  # stored as answered: the next turn answers them
                state.folded = [*folded, *batch]
                return
            control.folded = False  # it ended before the fold reached it: shown as it ended
        if task.cancelled() and turn.inbox_ids and not control.message_ids:
            await self._db(lambda: self._keep_unstarted(turn, head.chat_type))
        await reply.end(task, [*folded, *batch], self.info_button(turn.kind))

    def _folds(self, head: Incoming) -> bool:
        """Whether a message arriving during this turn's start may be folded into it."""
        return self.fold_bursts and head.rerun_of is None and head.user_id not in self._quiet

    async def _watch(
        self,
        task: asyncio.Task[TurnResult],
        control: TurnControl,
        reply: TurnReply,
        state: ChatState,
        head: Incoming,
    ) -> None:
        """Wait for the turn. Until it shows anything, a message the same person sends in the chat (here or
        through another process: the inbox is looked at every SETTLE_POLL_S) folds the turn into the next
        one: cancelled unseen, its messages stored as answered (core_tools/agent/loop.py)."""
        if not self._folds(head):
            await asyncio.wait({task})
            return
        while not task.done():
            if control.acted or reply.shown or state.lost:
                await asyncio.wait({task})
                return
            state.arrived.clear()
            arrived = asyncio.ensure_future(state.arrived.wait())
            try:
                await asyncio.wait(
                    {task, arrived}, timeout=SETTLE_POLL_S, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                arrived.cancel()
            if task.done() or control.acted or reply.shown or not control.message_ids:
                continue
            rows = await self._db(lambda: self.queue.waiting(head.chat_id))
            if rows and rows[0].user_id == head.user_id and rows[0].rerun_of is None and not control.acted:
                control.folded = True
                task.cancel()
                await asyncio.wait({task})
                return

    def _keep_unstarted(self, turn: TurnInput, chat_type: str) -> None:
        """A turn stopped before it began stored nothing: keep its messages as a stopped turn's are kept
        (else they would wait in the inbox and be answered again)."""
        conv = self.conversations
        if turn.rerun_of is not None:
            self.queue.discard(turn.inbox_ids)
            return
        session = conv.current_session(turn.user_id, turn.chat_id, chat_type=chat_type)
        texts = ((turn.text, turn.tg_message_id), *turn.more)
        ids = conv.inbox.store_turn(
            session.id, turn.user_id, turn.chat_id, texts, turn.inbox_ids, status="stopped"
        )
        media = self.agent.media
        for media_ids, msg_id in zip((turn.media_ids, *turn.more_media), ids, strict=False):
            if media is not None and media_ids:
                media.link(media_ids, msg_id, session.id)

    async def quiet_turn(self, turn: TurnInput) -> TurnResult:
        """A turn nobody watches stream (a scheduled task's): it waits for its chat like a message (after
        the turn running there, here or in another process) and returns the answer for delivery."""
        async with self.locks.hold(turn.chat_id):
            return await self.agent.run_turn(turn, QuietSink())

    # ------------------------------------------------------------------ control

    @asynccontextmanager
    async def quiet(self, user_id: int) -> AsyncIterator[None]:
        """While the user's data is erased: their running turns are stopped (their private chat's wherever
        it runs) and have ended, stored what they store and cleared their marks when this enters; a turn of
        theirs does not start, nor is a message of theirs stored, until it exits."""
        done = self._quiet.setdefault(user_id, asyncio.Event())
        try:
            for state in list(self._states.values()):
                running = state.running
                if running is not None and running.owner_id == user_id:
                    running.control.stop_requested = True
                    running.task.cancel()
            await self.stops.stop(user_id, user_id, True)  # their private chat's turn in another process
            async with self._ended:
                await self._ended.wait_for(lambda: user_id not in self._active)
            yield
        finally:
            if self._quiet.get(user_id) is done:
                del self._quiet[user_id]
            done.set()

    def stop_here(self, chat_id: int, number: int) -> bool:
        """Stop turn `number` of a chat if it runs in this process (a /stop another process received)."""
        return self.stops.stop_here(chat_id, number)

    async def stop(self, chat_id: int, user_id: int, is_owner: bool, number: int | None = None) -> str | None:
        """Stop the chat's running turn wherever it runs (bot/runtime/stops.py); what to tell the user."""
        return await self.stops.stop(chat_id, user_id, is_owner, number)

    async def retry(self, item: Incoming, is_owner: bool) -> str | None:
        """Answer the last user message of the chat's session again; returns a refusal, or None."""
        if await self.busy(item.chat_id):
            return STILL_ANSWERING
        session = self.conversations.current_session(item.user_id, item.chat_id, chat_type=item.chat_type)
        last = self.conversations.last_user_message(session.id)
        if last is None:
            return NOTHING_TO_RETRY
        if last.user_id != item.user_id and not is_owner:
            return NOT_YOURS.format(action="retry")
        await self.submit(
            item.changed(content=last.content, rerun_of=last.id, tg_message_id=last.tg_message_id)
        )
        return None

    async def edited(self, item: Incoming) -> str | None:
        """The user edited a message: re-run it when it is the latest and answered, else store it."""
        assert item.tg_message_id is not None
        if self.queue.inbox.edit_waiting(item.chat_id, item.user_id, item.tg_message_id, item.text):
            return None  # not started yet: its turn simply uses the new text
        found = self.conversations.find_by_telegram_id(item.chat_id, item.tg_message_id)
        if found is None:  # never seen (sent while the bot was down, or not addressed to it): a new message
            await self.submit(item)
            return None
        if found.user_id != item.user_id:
            return None
        self.conversations.edit_message(found.id, item.text)
        if found.status == "pending":
            return (
                "I am still answering your original message; your edit is saved. "
                "Send /retry when I am done to have the edited text answered."
            )
        session = self.conversations.current_session(item.user_id, item.chat_id, chat_type=item.chat_type)
        if not found.latest or found.session_id != session.id:
            return "Your edit is saved. It is an older message, so I did not answer it again."
        if await self.busy(item.chat_id):
            return "Your edit is saved. I am answering something else now; send /retry afterwards for it."
        await self.submit(item.changed(rerun_of=found.id, reply_to=item.tg_message_id))
        return None
