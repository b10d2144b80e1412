"""The per-chat turn runner: one turn at a time per chat, bursts as one turn, /stop, /retry and edits.

A message that arrives while its chat is idle waits `debounce_s` for more (each new one restarts the wait,
up to four times the debounce in all); then everything waiting goes into one turn. Messages that arrive
while a turn runs are queued and, when it ends, go into the next turn together (one turn each when merging
is off). The handler task of the message that found the chat idle drives the chat until its queue is
empty, so PTB still owns every task (shutdown cancels them); the turn itself runs in a task of its own
that `/stop` cancels.

Voice notes, photos and files (bot/media.py) come here once downloaded, transcribed or read, as an
`Incoming` carrying their media rows (and, for a voice note, the transcript the answer quotes), so they
queue, merge, stop and wait in the inbox exactly like text.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace

from telegram import Bot, MessageEntity

from bot.render import TELEGRAM_LIMIT, Rendered, render, utf16_len
from bot.streaming import StreamingReply, typing_indicator
from core_tools.agent import Agent, TurnControl, TurnInput, TurnResult
from core_tools.errors import BudgetExceeded, LLMUnavailable
from core_tools.tools.code import CodeTool
from db.conversations import Conversations

log = logging.getLogger(__name__)

STOP_NOTES = {
    "chain_limit": "(I stopped using tools: the limit of tool calls for one message was reached.)",
    "repeat_guard": "(I stopped using tools: I was repeating the same call.)",
    "budget": "(I stopped using tools: your usage cap is reached; /usage shows it.)",
}
STOPPED_MARK = "(stopped)"
NOTHING_RUNS = "Nothing is running in this chat, so there is nothing to stop."
NOT_YOURS = "Only the person who asked, or the bot's owner, can {action} this."
NO_VISION_NOTE = "(The model I use cannot see images, so I only read the text that came with it.)"
HEARD_COLLAPSE_CHARS = 200  # a longer transcript is shown as a collapsed (expandable) quote


def with_heard(transcript: str, answer: str) -> list[Rendered]:
    """The answer with a quoted "heard: ..." line on top (collapsed when the transcript is long)."""
    quote = f"heard: \u201c{transcript}\u201d"
    if utf16_len(quote) > TELEGRAM_LIMIT - 100:
        quote = quote[: TELEGRAM_LIMIT - 110] + "\u2026\u201d"
    kind = (
        MessageEntity.EXPANDABLE_BLOCKQUOTE
        if len(transcript) > HEARD_COLLAPSE_CHARS
        else MessageEntity.BLOCKQUOTE
    )
    head = Rendered(quote, (MessageEntity(kind, 0, utf16_len(quote)),))
    parts = render(answer) or [Rendered("(empty answer)", ())]
    first = parts[0]
    shift = utf16_len(quote) + 2
    if shift + utf16_len(first.text) > TELEGRAM_LIMIT:
        return [head, *parts]
    moved = tuple(
        MessageEntity(
            e.type,
            e.offset + shift,
            e.length,
            url=e.url,
            user=e.user,
            language=e.language,
            custom_emoji_id=e.custom_emoji_id,
        )
        for e in first.entities
    )
    return [Rendered(f"{quote}\n\n{first.text}", head.entities + moved), *parts[1:]]


class ChatLocks:
    """One lock per chat: turns and session changes in a chat run in order, chats run in parallel."""

    def __init__(self) -> None:
        self._locks: defaultdict[int, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._users: defaultdict[int, int] = defaultdict(int)

    @asynccontextmanager
    async def hold(self, chat_id: int) -> AsyncIterator[None]:
        """Wait for the chat's turn."""
        self._users[chat_id] += 1
        try:
            async with self._locks[chat_id]:
                yield
        finally:
            self._users[chat_id] -= 1
            if self._users[chat_id] == 0:  # forget idle chats so the map does not grow forever
                del self._users[chat_id]
                self._locks.pop(chat_id, None)


@dataclass
class Incoming:
    """A message (or a re-run of a stored one) waiting for its chat's turn."""

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

    def media(self) -> dict[str, object] | None:
        """What the inbox keeps of the media (None for plain text)."""
        if not self.media_ids and self.heard is None:
            return None
        return {"ids": list(self.media_ids), "heard": self.heard, "speak": self.speak}


@dataclass
class Running:
    """The turn a chat is running."""

    number: int
    owner_id: int
    control: TurnControl
    task: asyncio.Task[TurnResult]
    released: asyncio.Event = field(default_factory=asyncio.Event)  # the turn and its jobs are gone


class ChatState:
    """A chat's queue and running turn."""

    def __init__(self) -> None:
        self.queue: list[Incoming] = []
        self.running: Running | None = None
        self.driving = False
        self.arrived = asyncio.Event()


class TurnRunner:
    """Runs the turns of every chat: queueing, merging, stopping, re-running."""

    def __init__(
        self,
        agent: Agent,
        conversations: Conversations,
        code: CodeTool | None,
        *,
        debounce_s: float = 1.5,
        merge_bursts: bool = True,
        edit_interval_s: float = 1.0,
        model_for: Callable[[int], str | None] = lambda chat_id: None,
        locks: ChatLocks | None = None,
        speak: Callable[[Bot, Incoming, str], Awaitable[None]] | None = None,
    ) -> None:
        self.agent = agent
        self.conversations = conversations
        self.code = code
        self.debounce_s = debounce_s
        self.merge_bursts = merge_bursts
        self.edit_interval_s = edit_interval_s
        self.model_for = model_for
        self.locks = locks or ChatLocks()
        self.speak = speak  # the answer to a voice note as a voice note too (bot/media.py)
        self._states: dict[int, ChatState] = {}
        self._numbers = 0

    # ------------------------------------------------------------------ queueing

    def busy(self, chat_id: int) -> bool:
        """Whether the chat has a turn running or messages waiting."""
        state = self._states.get(chat_id)
        return state is not None and (state.running is not None or bool(state.queue))

    async def submit(self, bot: Bot, item: Incoming) -> None:
        """Store and queue a message; the first caller for an idle chat drives it until its queue is empty."""
        if item.rerun_of is None and item.inbox_id is None:
            # In the database before any wait: a restart during the debounce or another turn loses nothing.
            item.inbox_id = self.conversations.inbox.put(
                item.user_id,
                item.chat_id,
                item.chat_type,
                item.text,
                first_name=item.first_name,
                username=item.username,
                tg_message_id=item.tg_message_id,
                media=item.media(),
            )
        state = self._states.setdefault(item.chat_id, ChatState())
        state.queue.append(item)
        state.arrived.set()
        await self._drive_if_idle(bot, item.chat_id, state)

    def restore(self, items: list[Incoming]) -> list[int]:
        """Queue messages a stopped process left in the inbox (in arrival order); returns their chats.
        Synchronous, so they are queued before any new message of their chats."""
        for item in items:
            self._states.setdefault(item.chat_id, ChatState()).queue.append(item)
        return list(dict.fromkeys(item.chat_id for item in items))

    async def resume(self, bot: Bot, chat_ids: list[int]) -> None:
        """Answer the restored messages of these chats (those a new message has not already driven)."""
        states = [(c, s) for c in chat_ids if (s := self._states.get(c)) is not None]
        results = await asyncio.gather(
            *(self._drive_if_idle(bot, c, s) for c, s in states), return_exceptions=True
        )
        for (chat_id, _), result in zip(states, results, strict=True):
            if isinstance(result, BaseException):
                log.error("chat %s: answering restored messages failed", chat_id, exc_info=result)

    async def _drive_if_idle(self, bot: Bot, chat_id: int, state: ChatState) -> None:
        if state.driving:
            return
        state.driving = True
        try:
            await self._drive(bot, chat_id, state)
        finally:
            state.driving = False
            if state.queue:  # after an unexpected error or at shutdown: the next start answers them
                log.warning("chat %s: %d queued message(s) left in the inbox", chat_id, len(state.queue))
                state.queue.clear()
            if state.running is None and self._states.get(chat_id) is state:
                del self._states[chat_id]

    async def _drive(self, bot: Bot, chat_id: int, state: ChatState) -> None:
        first = True
        while state.queue:
            if first and self.debounce_s > 0 and state.queue[0].rerun_of is None:
                async with typing_indicator(bot, chat_id):  # the user sees the bot is about to answer
                    await self._settle(state)
            first = False
            batch = self._take(state)
            async with self.locks.hold(chat_id):
                await self._run(bot, batch, state)

    async def _settle(self, state: ChatState) -> None:
        """Wait until no message arrived for `debounce_s` (at most four debounces in all)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 4 * self.debounce_s
        while True:
            state.arrived.clear()
            remaining = min(self.debounce_s, deadline - loop.time())
            if remaining <= 0:
                return
            try:
                await asyncio.wait_for(state.arrived.wait(), remaining)
            except TimeoutError:
                return

    def _take(self, state: ChatState) -> list[Incoming]:
        """The next turn's messages: the head, and with merging the same speaker's plain messages after it."""
        head = state.queue.pop(0)
        batch = [head]
        if self.merge_bursts and head.rerun_of is None:
            while state.queue and state.queue[0].user_id == head.user_id and state.queue[0].rerun_of is None:
                batch.append(state.queue.pop(0))
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
        self._numbers += 1
        number = self._numbers
        reply = StreamingReply(
            bot,
            head.chat_id,
            min_interval=self.edit_interval_s,
            stop_data=f"stop:{number}",
            reply_to=head.reply_to,
        )
        control = TurnControl()
        task = asyncio.create_task(self.agent.run_turn(turn, reply, control))
        running = state.running = Running(number, head.user_id, control, task)
        try:
            async with typing_indicator(bot, head.chat_id, last_sent=head.typing_at):
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
        if task.cancelled() and turn.inbox_ids and not control.message_ids:
            self._keep_unstarted(turn, head.chat_type)
        answer = await self._deliver(reply, task, batch)
        if answer is not None and self.speak is not None and any(b.speak for b in batch):
            await self.speak(bot, head, answer)  # still in the chat's lock: before the next turn's answer

    def _keep_unstarted(self, turn: TurnInput, chat_type: str) -> None:
        """A turn stopped before it began stored nothing: keep its messages as a stopped turn's are kept
        (else they would wait in the inbox and be answered at the next start)."""
        conv = self.conversations
        session = conv.current_session(turn.user_id, turn.chat_id, chat_type=chat_type)
        texts = ((turn.text, turn.tg_message_id), *turn.more)
        ids = conv.inbox.store_turn(
            session.id, turn.user_id, turn.chat_id, texts, turn.inbox_ids, status="stopped"
        )
        media = self.agent.media
        for media_ids, msg_id in zip((turn.media_ids, *turn.more_media), ids, strict=False):
            if media is not None and media_ids:
                media.link(media_ids, msg_id, session.id)

    async def _deliver(
        self, reply: StreamingReply, task: asyncio.Task[TurnResult], batch: list[Incoming]
    ) -> str | None:
        """Show how the turn ended; returns the answer when there is one."""
        if task.cancelled():  # stopped before the turn began
            await reply.finish_plain(STOPPED_MARK)
            return None
        exc = task.exception()
        if isinstance(exc, BudgetExceeded):
            await reply.finish_plain(str(exc))
        elif isinstance(exc, LLMUnavailable):
            await reply.finish_plain(
                f"Sorry, I could not get an answer: {exc}. Your message is saved; "
                "please try again in a moment."
            )
        elif isinstance(exc, TimeoutError):
            await reply.finish_plain(
                "Sorry, that took too long and I stopped. Your message is saved; try again, "
                "or ask for something smaller."
            )
        elif exc is not None:
            log.error("error while answering in chat %s", reply.chat_id, exc_info=exc)
            await reply.finish_plain(
                "Sorry, something went wrong on my side. It is logged; please try again."
            )
        else:
            result = task.result()
            if result.stopped_by == "user":
                partial = result.text.strip()
                await reply.finish(f"{partial}\n\n{STOPPED_MARK}" if partial else STOPPED_MARK)
                return None
            answer = result.text.strip() or "(I have no answer to that.)"
            if result.stopped_by in STOP_NOTES:
                answer = f"{answer}\n\n{STOP_NOTES[result.stopped_by]}"
            if result.images_dropped and any(b.media_ids for b in batch):
                answer = f"{answer}\n\n{NO_VISION_NOTE}"
            heard = [b.heard for b in batch if b.heard is not None]
            if heard:
                await reply.finish_rendered(with_heard(" / ".join(heard), answer))
            else:
                await reply.finish(answer)
            return answer
        return None

    # ------------------------------------------------------------------ control

    async def stop(self, chat_id: int, user_id: int, is_owner: bool, number: int | None = None) -> str | None:
        """Stop the chat's running turn (`number`: only that one, for a Stop button); returns what to tell
        the user, or None when the stopped answer itself says it. Returns once the turn is released: its
        LLM stream closed, its tool calls (and sandbox runs) and background jobs cancelled."""
        state = self._states.get(chat_id)
        running = state.running if state is not None else None
        if running is None or (number is not None and running.number != number):
            return NOTHING_RUNS if number is None else "That answer is already finished."
        if running.owner_id != user_id and not is_owner:
            return NOT_YOURS.format(action="stop")
        running.control.stop_requested = True
        running.task.cancel()
        await running.released.wait()
        return None

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
        state = self._states.get(item.chat_id)
        for waiting in state.queue if state is not None else []:
            if waiting.tg_message_id == item.tg_message_id and waiting.user_id == item.user_id:
                waiting.text = item.text  # not started yet: the turn simply uses the new text
                if waiting.inbox_id is not None:
                    self.conversations.inbox.edit(waiting.inbox_id, item.text)
                return None
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
