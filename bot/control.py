"""The per-chat turn runner: one turn at a time per chat, bursts as one turn, /stop, /retry and edits,
across any number of processes on one database.

A message that arrives while its chat is idle waits `debounce_s` for more (each new one restarts the wait,
up to four times the debounce in all); then everything waiting goes into one turn. Messages that arrive
while a turn runs wait in the inbox and, when it ends, go into the next turn together (one turn each when
merging is off). The inbox is the queue, in Telegram's update order: whichever process holds the chat's
lease (bot/cluster.py) takes its messages, so two processes never answer one chat at once. The handler
task of the message that found the chat free drives it until its inbox is empty, so PTB still owns every
task (shutdown cancels them); the turn itself runs in a task of its own that `/stop` cancels, also when
the /stop reached another process.

A "chat" here is a conversation key (db/topics.py): the chat id, or a forum topic's own key, so each topic
of a forum queues, leases, stops and answers on its own; `place` says where its messages go in Telegram.

Voice notes, photos and files (bot/media.py) come here once downloaded, transcribed or read, as an
`Incoming` carrying their media rows (and, for a voice note, the transcript the answer quotes), so they
queue, merge, stop and wait in the inbox exactly like text.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field, replace
from datetime import datetime

from telegram import Bot
from telegram.error import TelegramError

from bot.answers import deliver
from bot.cluster import ChatLeases, ChatLocks
from bot.streaming import StreamingReply, typing_indicator
from core_tools.agent import Agent, TurnControl, TurnInput, TurnResult
from core_tools.tools.code import CodeTool
from db.conversations import Conversations
from db.inbox import Queued
from db.replicas import Cluster
from db.topics import Place

log = logging.getLogger(__name__)

NOTHING_RUNS = "Nothing is running in this chat, so there is nothing to stop."
NOT_YOURS = "Only the person who asked, or the bot's owner, can {action} this."
STOP_WAIT_S = 20.0  # how long a /stop waits for another process to end the turn
SETTLE_POLL_S = 0.2  # how often the debounce looks for messages another process stored


@dataclass
class Incoming:
    """A message (or a re-run of a stored one) for its chat's next turn."""

    user_id: int
    chat_id: int
    text: str
    first_name: str | None
    username: str | None
    chat_type: str
    tg_message_id: int | None = None
    rerun_of: int | None = None  # a stored user message to answer again (/retry, an edit)
    reply_to: int | None = None  # the Telegram message the answer refers to (an edit)
    inbox_id: int | None = None  # where it waits in the database (db/inbox.py) until its turn stores it
    media_ids: tuple[int, ...] = ()  # media_files rows of a voice note, photo, album or file
    heard: str | None = None  # a voice note's transcript: the answer quotes it on top
    speak: bool = False  # a voice note: the answer also goes out as a voice note
    typing_at: float | None = None  # when "typing" was last shown for it (its transcription), monotonic
    update_id: int | None = None  # the Telegram update it came in (the chat's queue is in this order)

    def media(self) -> dict[str, object] | None:
        """What the inbox keeps of the media (None for plain text)."""
        if not self.media_ids and self.heard is None:
            return None
        return {"ids": list(self.media_ids), "heard": self.heard, "speak": self.speak}

    @classmethod
    def waiting(cls, q: Queued) -> Incoming:
        """A message as it waits in the inbox."""
        media = q.media or {}
        return cls(
            q.user_id,
            q.chat_id,
            q.content,
            q.first_name,
            q.username,
            q.chat_type,
            tg_message_id=q.tg_message_id,
            rerun_of=q.rerun_of,
            reply_to=q.reply_to,
            inbox_id=q.id,
            media_ids=tuple(media.get("ids") or ()),
            heard=media.get("heard"),
            speak=bool(media.get("speak")),
            update_id=q.update_id,
        )


@dataclass
class Running:
    """The turn a chat is running."""

    number: int
    owner_id: int
    control: TurnControl
    task: asyncio.Task[TurnResult]
    released: asyncio.Event = field(default_factory=asyncio.Event)  # the turn and its jobs are gone


class ChatState:
    """A chat this process drives: its running turn, and a signal that a message came in here."""

    def __init__(self) -> None:
        self.running: Running | None = None
        self.arrived = asyncio.Event()
        # (inbox id, arrival) of messages a turn already took: a turn that could not even store them does
        # not loop on them (SQLite reuses a deleted row's id, hence the arrival time).
        self.tried: set[tuple[int, datetime]] = set()


class TurnRunner:
    """Runs the turns of every chat this process drives: queueing, merging, stopping, re-running.

    The inbox table is the queue. A message is stored, then the process that stored it takes the chat's
    lease if no live process holds it and drives the chat until its inbox is empty; a process already
    driving it (here or elsewhere) takes the message in its next turn; a chat left over (no free slot here,
    a process died) is taken by whichever process finds it first (bot/cluster.py)."""

    def __init__(
        self,
        agent: Agent,
        conversations: Conversations,
        code: CodeTool | None,
        chats: ChatLeases,
        *,
        debounce_s: float = 1.5,
        merge_bursts: bool = True,
        edit_interval_s: float = 1.0,
        model_for: Callable[[int], str | None] = lambda chat_id: None,
        locks: ChatLocks | None = None,
        speak: Callable[[Bot, Incoming, str], Awaitable[None]] | None = None,
        max_chats: int = 0,
        on_free: Callable[[], None] = lambda: None,
    ) -> None:
        self.agent = agent
        self.conversations = conversations
        self.inbox = conversations.inbox
        self.code = code
        self.chats = chats
        self.cluster: Cluster = chats.cluster
        self.debounce_s = debounce_s
        self.merge_bursts = merge_bursts
        self.edit_interval_s = edit_interval_s
        self.model_for = model_for
        self.locks = locks or ChatLocks(chats)
        self.speak = speak  # the answer to a voice note as a voice note too (bot/media.py)
        self.max_chats = max_chats  # chats driven at once here (MAX_CONCURRENT_TURNS; 0: no limit)
        self.on_free = on_free  # a slot came free: look for chats nobody drives
        self._states: dict[int, ChatState] = {}
        self._typing: dict[int, float] = {}  # inbox id -> when "typing" was shown for it here

    def place(self, chat_id: int) -> Place:
        """Where a conversation (a chat, or a forum topic's key: db/topics.py) is answered in Telegram."""
        return self.conversations.topics.place(chat_id)

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

    def busy(self, chat_id: int) -> bool:
        """Whether the chat has a turn running (in any process) or messages waiting."""
        state = self._states.get(chat_id)
        if state is not None and state.running is not None:
            return True
        return self.inbox.has_waiting(chat_id) or self.cluster.running(chat_id) is not None

    async def submit(self, bot: Bot, item: Incoming) -> None:
        """Store a message; drive its chat unless a process already does (it takes the message next)."""
        if item.inbox_id is None:
            # In the database before any wait: a restart during the debounce or another turn loses nothing.
            item.inbox_id = self.inbox.put(
                item.user_id,
                item.chat_id,
                item.chat_type,
                item.text,
                first_name=item.first_name,
                username=item.username,
                tg_message_id=item.tg_message_id,
                media=item.media(),
                update_id=item.update_id,
                rerun_of=item.rerun_of,
                reply_to=item.reply_to,
            )
        if item.typing_at is not None:
            self._typing[item.inbox_id] = item.typing_at
        await self.drive(bot, item.chat_id)

    async def drive(self, bot: Bot, chat_id: int) -> None:
        """Answer what waits in the chat, holding its lease, until nothing does (a no-op when a process
        drives it already, or when this one has no free slot: another process, or a later look, takes it)."""
        state = self._states.get(chat_id)
        if state is not None:
            state.arrived.set()
            return
        if self.free() <= 0:
            return
        taken = self.chats.try_take(chat_id)
        if taken is None:
            return
        state = self._states[chat_id] = ChatState()
        try:
            if taken:  # nobody held it: a turn still pending in it was cut when its process died
                await self._report_interrupted(bot, chat_id)
            while True:
                await self._drive(bot, chat_id, state)
                # No await from the empty inbox to here: a message stored in this process meanwhile is
                # impossible, and one stored by another process keeps the lease (the release checks).
                if self.chats.give_back(chat_id, only_if_idle=True):
                    break
        except BaseException:
            self.chats.give_back(chat_id)
            raise
        finally:
            del self._states[chat_id]
            self.on_free()

    async def _report_interrupted(self, bot: Bot, chat_id: int) -> None:
        """Tell the chat about messages whose turn a stopped process could not finish."""
        for pending in self.conversations.take_pending(chat_id):
            snippet = pending.content if len(pending.content) <= 80 else pending.content[:77] + "..."
            place = self.place(pending.chat_id)
            try:
                await bot.send_message(
                    place.chat_id,
                    f"I was restarted while answering your message \u201c{snippet}\u201d and could not "
                    "finish. Please send it again if you still need an answer.",
                    message_thread_id=place.thread_id,
                )
            except TelegramError as exc:
                log.warning("could not tell chat %s about an interrupted message: %s", chat_id, exc)

    async def _drive(self, bot: Bot, chat_id: int, state: ChatState) -> None:
        first = True
        while rows := self.inbox.waiting_in(chat_id):
            if first and self.debounce_s > 0 and rows[0].rerun_of is None:
                place = self.place(chat_id)  # the user sees the bot is about to answer:
                async with typing_indicator(bot, place.chat_id, thread_id=place.thread_id):
                    await self._settle(chat_id, state)
                rows = self.inbox.waiting_in(chat_id)
                if not rows:
                    return
            first = False
            again = [q.id for q in rows if (q.id, q.received_at) in state.tried]
            if again:  # a turn took them and could not even store them: do not loop on them
                log.error("chat %s: dropping %d message(s) a turn could not store", chat_id, len(again))
                self.inbox.discard(again)
                continue
            batch = self._take([Incoming.waiting(q) for q in rows])
            taken = {b.inbox_id for b in batch}
            state.tried.update((q.id, q.received_at) for q in rows if q.id in taken)
            async with self.locks.hold(chat_id):
                await self._run(bot, batch, state)

    async def _settle(self, chat_id: int, state: ChatState) -> None:
        """Wait until no message arrived for `debounce_s` (at most four debounces in all), here or in
        another process (its messages are seen in the inbox)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 4 * self.debounce_s
        latest = self.inbox.latest_in(chat_id)
        quiet_until = loop.time() + self.debounce_s
        while True:
            now = loop.time()
            remaining = min(quiet_until, deadline) - now
            if remaining <= 0:
                return
            state.arrived.clear()
            with suppress(TimeoutError):
                await asyncio.wait_for(state.arrived.wait(), min(remaining, SETTLE_POLL_S))
            newest = self.inbox.latest_in(chat_id)
            if newest != latest or state.arrived.is_set():
                latest = newest
                quiet_until = loop.time() + self.debounce_s

    def _take(self, waiting: list[Incoming]) -> list[Incoming]:
        """The next turn's messages: the head, and with merging the same speaker's plain messages after it."""
        head = waiting[0]
        batch = [head]
        if self.merge_bursts and head.rerun_of is None:
            for item in waiting[1:]:
                if item.user_id != head.user_id or item.rerun_of is not None:
                    break
                batch.append(item)
        for item in batch:
            if item.inbox_id is not None:
                item.typing_at = self._typing.pop(item.inbox_id, None)
        return batch

    # ------------------------------------------------------------------ one turn

    async def _run(self, bot: Bot, batch: list[Incoming], state: ChatState) -> None:
        head = batch[0]
        turn = TurnInput(
            head.user_id,
            head.chat_id,
            head.text,
            head.first_name,
            head.username,
            head.chat_type,
            tg_message_id=head.tg_message_id,
            more=tuple((b.text, b.tg_message_id) for b in batch[1:]),
            rerun_of=head.rerun_of,
            model=self.model_for(head.chat_id),
            inbox_ids=tuple(b.inbox_id for b in batch if b.inbox_id is not None),
            media_ids=head.media_ids,
            more_media=tuple(b.media_ids for b in batch[1:]),
        )
        number = secrets.randbits(48)  # unique across processes (an inbox id is not: SQLite reuses them)
        place = self.place(head.chat_id)
        reply = StreamingReply(
            bot,
            place.chat_id,
            min_interval=self.edit_interval_s,
            stop_data=f"stop:{number}",
            reply_to=head.reply_to,
            thread_id=place.thread_id,
        )
        control = TurnControl()
        task = asyncio.create_task(self.agent.run_turn(turn, reply, control))
        running = state.running = Running(number, head.user_id, control, task)
        self.cluster.start_turn(head.chat_id, self.chats.me, number, head.user_id)
        try:
            async with typing_indicator(
                bot, place.chat_id, last_sent=head.typing_at, thread_id=place.thread_id
            ):
                await asyncio.wait({task})
            if control.stop_requested and self.code is not None and control.message_ids:
                await self.code.cancel_turn(control.message_ids[0])  # its background jobs stop too
        except asyncio.CancelledError:  # shutdown: the turn goes with the handler (stored as interrupted)
            task.cancel()
            await asyncio.wait({task})
            raise
        finally:
            state.running = None
            running.released.set()
            self.cluster.end_turn(head.chat_id, self.chats.me)
        if task.cancelled() and turn.inbox_ids and not control.message_ids:
            self._keep_unstarted(turn, head.chat_type)
        heard = [b.heard for b in batch if b.heard is not None]
        answer = await deliver(reply, task, any(b.media_ids for b in batch), heard)
        if answer is not None and self.speak is not None and any(b.speak for b in batch):
            await self.speak(bot, head, answer)  # still in the chat's lock: before the next turn's answer

    def _keep_unstarted(self, turn: TurnInput, chat_type: str) -> None:
        """A turn stopped before it began stored nothing: keep its messages as a stopped turn's are kept
        (else they would wait in the inbox and be answered again)."""
        conv = self.conversations
        if turn.rerun_of is not None:
            self.inbox.discard(turn.inbox_ids)
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

    # ------------------------------------------------------------------ control

    def stop_here(self, chat_id: int, number: int) -> bool:
        """Stop turn `number` of a chat if it runs in this process (a /stop another process received)."""
        state = self._states.get(chat_id)
        running = state.running if state is not None else None
        if running is None or running.number != number:
            return False
        running.control.stop_requested = True
        running.task.cancel()
        return True

    async def stop(self, chat_id: int, user_id: int, is_owner: bool, number: int | None = None) -> str | None:
        """Stop the chat's running turn (`number`: only that one, for a Stop button), wherever it runs;
        returns what to tell the user, or None when the stopped answer itself says it. Returns once the
        turn is released: its LLM stream closed, its tool calls (and sandbox runs) and background jobs
        cancelled (in another process: once it reports the turn ended)."""
        state = self._states.get(chat_id)
        running = state.running if state is not None else None
        if running is None:
            return await self._stop_elsewhere(chat_id, user_id, is_owner, number)
        if number is not None and running.number != number:
            return "That answer is already finished."
        if running.owner_id != user_id and not is_owner:
            return NOT_YOURS.format(action="stop")
        running.control.stop_requested = True
        running.task.cancel()
        await running.released.wait()
        return None

    async def _stop_elsewhere(
        self, chat_id: int, user_id: int, is_owner: bool, number: int | None
    ) -> str | None:
        remote = self.cluster.running(chat_id)
        if remote is None or (number is not None and remote.turn != number):
            return NOTHING_RUNS if number is None else "That answer is already finished."
        if remote.owner != user_id and not is_owner:
            return NOT_YOURS.format(action="stop")
        if not self.cluster.request_stop(chat_id, remote.turn):
            return None  # it ended meanwhile
        loop = asyncio.get_running_loop()
        deadline = loop.time() + STOP_WAIT_S
        while loop.time() < deadline:
            now = self.cluster.running(chat_id)
            if now is None or now.turn != remote.turn:
                return None
            await asyncio.sleep(0.05)
        return "I asked the turn to stop; it has not ended yet."

    async def retry(self, bot: Bot, item: Incoming, is_owner: bool) -> str | None:
        """Answer the last user message of the chat's session again; returns a refusal, or None."""
        if self.busy(item.chat_id):
            return "I am still answering. Use /stop first, or wait until I am done, then /retry."
        session = self.conversations.current_session(item.user_id, item.chat_id, chat_type=item.chat_type)
        last = self.conversations.last_user_message(session.id)
        if last is None:
            return "There is nothing to retry in this session yet."
        if last.user_id != item.user_id and not is_owner:
            return NOT_YOURS.format(action="retry")
        await self.submit(
            bot, replace(item, text=last.content, rerun_of=last.id, tg_message_id=last.tg_message_id)
        )
        return None

    async def edited(self, bot: Bot, item: Incoming) -> str | None:
        """The user edited a message: re-run it when it is the latest and answered, else store it."""
        assert item.tg_message_id is not None
        if self.inbox.edit_waiting(item.chat_id, item.user_id, item.tg_message_id, item.text):
            return None  # not started yet: its turn simply uses the new text
        found = self.conversations.find_by_telegram_id(item.chat_id, item.tg_message_id)
        if found is None:  # never seen (sent while the bot was down, or not addressed to it): a new message
            await self.submit(bot, item)
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
        if self.busy(item.chat_id):
            return "Your edit is saved. I am answering something else now; send /retry afterwards for it."
        await self.submit(bot, replace(item, rerun_of=found.id, reply_to=item.tg_message_id))
        return None
