"""A reply that streams by throttled message edits and always delivers the final, formatted text."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from telegram import Bot, InlineKeyboardButton, InlineKeyboardMarkup, MessageEntity, ReplyParameters
from telegram.constants import ChatAction
from telegram.error import BadRequest, NetworkError, RetryAfter, TelegramError

from bot.adapter.render import TELEGRAM_LIMIT, Rendered, plain_chunks, render, split_rendered, utf16_len
from bot.runtime.vigil.deliveries import Deliveries
from core_tools.aio import wait_event
from core_tools.code.output import elapsed_text

log = logging.getLogger(__name__)

PREVIEW_LIMIT = TELEGRAM_LIMIT - 96
FINAL_ATTEMPTS = 6
FIRST_PREVIEW_DELAY_S = 0.5
MIN_PIECE = 64  # a message refused as too long is halved until its pieces are this short
RETRY_PAUSE_MAX_S = 30.0  # the longest pause between two tries of a final part that keeps failing


def _retry_seconds(exc: RetryAfter) -> float:
    ra = exc.retry_after
    return ra if isinstance(ra, (int, float)) else ra.total_seconds()


class StreamingReply:
    """Implements the agent's TurnSink for one Telegram chat.

    While the answer streams, one message is edited at most once per `min_interval` seconds and only when
    its text changed; a 429 pauses edits for `retry_after`. `finish` replaces the preview with the rendered
    answer, split into as many messages as needed, retrying until it is delivered.
    """

    def __init__(
        self,
        bot: Bot,
        chat_id: int,
        *,
        min_interval: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        stop_data: str | None = None,
        reply_to: int | None = None,
        thread_id: int | None = None,
        guard: Callable[[], Awaitable[bool]] | None = None,
        deliveries: Deliveries | None = None,
        retry_s: float = 0.0,
        keep_trying: Callable[[], bool] = lambda: True,
    ) -> None:
        self.bot = bot
        # A final part whose send keeps failing (network trouble, 5xx) is retried with a growing pause for
        # `retry_s` after FINAL_ATTEMPTS quick tries, reported to `deliveries` meanwhile (the watchdog), as
        # long as `keep_trying()` (False: the application stops; the answer stays stored).
        self.deliveries = deliveries
        self.retry_s = retry_s
        self.keep_trying = keep_trying
        self._token: int | None = None  # this answer's entry in `deliveries` while its send fails
        self.thread_id = thread_id  # the forum topic its messages go to (edits stay where they are)
        # Asked before every send and edit: False shows nothing more (bot/runtime/runner.py: the chat went to
        # another process).
        self.guard = guard
        # While the answer streams its message carries a Stop button (callback data `stop_data`); the
        # final text replaces it. `reply_to`: the first message refers to this one (an edited question).
        self._markup = (
            InlineKeyboardMarkup([[InlineKeyboardButton("Stop", callback_data=stop_data)]])
            if stop_data
            else None
        )
        self._reply = ReplyParameters(reply_to, allow_sending_without_reply=True) if reply_to else None
        self.chat_id = chat_id
        self.min_interval = min_interval
        self.clock = clock
        self.message_id: int | None = None
        self._text = ""
        self._status: str | None = None
        self._shown = ""
        self._next_edit: float | None = None  # set when the first text or status arrives
        self._flush_task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self._finished = False
        self._stale_preview: int | None = None  # a preview the final answer could not be edited into

    @property
    def streamed(self) -> str:
        """The answer streamed so far (what the preview shows, without its status line)."""
        return self._text

    async def text(self, partial: str) -> None:
        """The answer so far."""
        self._text = partial
        self._status = None
        await self._update()

    async def status(self, line: str) -> None:
        """A one-line status under the text, replaced by the answer."""
        self._status = line
        await self._update()

    def _preview(self) -> str:
        body = self._text
        if utf16_len(body) > PREVIEW_LIMIT:
            body = body[: PREVIEW_LIMIT // 2] + "\n…"
        if self._status:
            body = f"{body}\n\n⏳ {self._status}" if body.strip() else f"⏳ {self._status}"
        return body

    async def _update(self) -> None:
        if self._finished:
            return
        if self._next_edit is None:
            # The first preview waits a moment after the stream starts: an answer that streams quickly
            # goes out once, formatted, with no edit at all (the typing indicator covers the wait).
            self._next_edit = self.clock() + min(FIRST_PREVIEW_DELAY_S, self.min_interval)
        wait = self._next_edit - self.clock()
        if wait > 0:
            self._schedule(wait)
            return
        await self._flush()

    def _schedule(self, wait: float) -> None:
        # Throttled: show the latest text when the interval is over, even if nothing else comes.
        task = self._flush_task
        if task is None or task.done() or task is asyncio.current_task():
            self._flush_task = asyncio.create_task(self._delayed_flush(wait))

    async def _delayed_flush(self, wait: float) -> None:
        await asyncio.sleep(wait)
        await self._flush()

    async def _flush(self) -> None:
        async with self._lock:
            if self._finished:
                return
            wait = (self._next_edit or 0.0) - self.clock()
            if wait > 0:  # another flush went out while this one waited for the lock
                self._schedule(wait)
                return
            preview = self._preview()
            if not preview.strip() or preview == self._shown:
                return
            if self.guard is not None and not await self.guard():
                self._finished = True
                return
            self._next_edit = self.clock() + self.min_interval
            try:
                if self.message_id is None:
                    msg = await self.bot.send_message(
                        self.chat_id,
                        preview,
                        reply_markup=self._markup,
                        reply_parameters=self._reply,
                        message_thread_id=self.thread_id,
                    )
                    self.message_id = msg.message_id
                    self._reply = None
                else:
                    await self.bot.edit_message_text(
                        preview, self.chat_id, self.message_id, reply_markup=self._markup
                    )
                self._shown = preview
            except RetryAfter as exc:
                self._next_edit = self.clock() + _retry_seconds(exc)
                log.info("chat %s: edits paused for %.0f s (429)", self.chat_id, _retry_seconds(exc))
            except TelegramError as exc:  # a preview is not essential; the final text is
                log.info("chat %s: preview update failed: %s", self.chat_id, exc)

    async def finish(self, markdown: str, markup: InlineKeyboardMarkup | None = None) -> list[int]:
        """Deliver the final answer (rendered Markdown); returns the ids of the messages that carry it.
        `markup`: buttons under its last message (the answer's ⓘ)."""
        return await self.finish_rendered(render(markdown) or [Rendered("(empty answer)", ())], markup)

    async def finish_plain(self, text: str) -> list[int]:
        """Deliver a plain-text final message (errors, notices)."""
        return await self.finish_rendered([Rendered(t, ()) for t in plain_chunks(text)])

    async def finish_rendered(
        self, parts: list[Rendered], markup: InlineKeyboardMarkup | None = None
    ) -> list[int]:
        """Deliver already rendered parts (`markup`: buttons under the last one).

        Whatever Telegram refuses, the rest still goes: a part refused with formatting goes as plain text, one
        refused as too long goes in smaller pieces, a preview that cannot take the text is replaced by new
        messages. A part refused even so is named in a short note; this raises only when nothing arrived.
        """
        self._finished = True
        if self._flush_task is not None and not self._lock.locked():
            # Only a flush still waiting is cancelled: one under way has reached Telegram, which may have
            # stored the preview already (a cancelled request would leave it beside the answer), so the
            # answer waits for it below and goes into that message.
            self._flush_task.cancel()
        async with self._lock:
            if self.guard is not None and not await self.guard():
                return []
            ids: list[int] = []
            refused: list[BadRequest] = []
            for i, part in enumerate(parts):
                try:
                    last = markup if i == len(parts) - 1 else None
                    ids.extend(await self._deliver(part, self.message_id if i == 0 else None, last))
                except BadRequest as exc:  # (network trouble that outlasted the retries still raises)
                    log.error(
                        "chat %s: part %d of %d of the answer was refused: %s",
                        self.chat_id,
                        i + 1,
                        len(parts),
                        exc,
                    )
                    refused.append(exc)
            if refused:
                ids.extend(await self._tell_refused(refused, len(parts)))
            if refused and not ids:
                raise refused[-1]
            if self._stale_preview is not None and self._stale_preview not in ids:
                # The preview could not be edited into the answer, which went as new messages: the half
                # streamed text (and its Stop button) must not stay above it.
                with contextlib.suppress(TelegramError):
                    await self.bot.delete_message(self.chat_id, self._stale_preview)
            return ids

    async def _tell_refused(self, refused: list[BadRequest], parts: int) -> list[int]:
        """A short plain note about parts Telegram would not take in any form (the answer is stored)."""
        note = (
            f"(Telegram refused {len(refused)} of the {parts} parts of this answer: {refused[-1]}. "
            "The answer is saved; ask me to repeat it in shorter form.)"
        )
        with contextlib.suppress(TelegramError):
            msg = await self.bot.send_message(self.chat_id, note, message_thread_id=self.thread_id)
            return [msg.message_id]
        return []

    async def _deliver(
        self, part: Rendered, edit_id: int | None, markup: InlineKeyboardMarkup | None = None
    ) -> list[int]:
        delivered = False
        try:
            ids = await self._deliver_retrying(part, edit_id, markup)
            delivered = True
            return ids
        finally:
            if self.deliveries is not None and self._token is not None:
                self.deliveries.done(self._token, delivered)  # went, or given up (it stays stored)
                self._token = None

    async def _deliver_retrying(
        self, part: Rendered, edit_id: int | None, markup: InlineKeyboardMarkup | None
    ) -> list[int]:
        entities: tuple[MessageEntity, ...] | None = part.entities or None
        loop = asyncio.get_running_loop()
        started = loop.time()
        attempt = 0
        failing = False  # the last attempt failed on the network or the server (worth retrying long)
        while attempt < FINAL_ATTEMPTS or (failing and loop.time() - started < self.retry_s):
            attempt += 1
            if attempt > FINAL_ATTEMPTS:
                if not self.keep_trying():
                    break  # the application stops: the answer stays in the history
                if self.guard is not None and not await self.guard():
                    break  # the chat went to another process meanwhile: it answers from here on
            failing = False
            try:
                if edit_id is not None:
                    await self.bot.edit_message_text(
                        part.text,
                        self.chat_id,
                        edit_id,
                        entities=entities,
                        reply_markup=markup,
                    )
                    return [edit_id]
                msg = await self.bot.send_message(
                    self.chat_id,
                    part.text,
                    entities=entities,
                    reply_parameters=self._reply,
                    message_thread_id=self.thread_id,
                    reply_markup=markup,
                )
                self._reply = None  # only the first message refers to the question
                return [msg.message_id]
            except RetryAfter as exc:
                await asyncio.sleep(_retry_seconds(exc))
            except BadRequest as exc:
                text = str(exc).lower()
                if "not modified" in text:
                    return [edit_id] if edit_id is not None else []
                if entities and ("entit" in text or "parse" in text):
                    log.info("chat %s: formatting rejected (%s); sending plain text", self.chat_id, exc)
                    entities = None
                    continue
                if edit_id is not None:
                    # The preview cannot take this text (gone, not editable, or too long by the Bot API's
                    # count): the answer goes as new messages, and the preview is removed afterwards.
                    log.info(
                        "chat %s: the preview cannot be edited (%s); sending the answer anew",
                        self.chat_id,
                        exc,
                    )
                    self._stale_preview, edit_id = edit_id, None
                    continue
                if _too_long(text):
                    pieces = await self._deliver_in_pieces(Rendered(part.text, entities or ()), exc, markup)
                    if pieces is not None:
                        return pieces
                if entities:  # refused for another reason: plain text may still pass
                    log.info("chat %s: message refused (%s); trying plain text", self.chat_id, exc)
                    entities = None
                    continue
                raise
            except TelegramError as exc:  # network trouble or 5xx: try again shortly, then less often
                failing = isinstance(exc, NetworkError)  # (a 403 or 409 is not healed by waiting)
                if failing and self.deliveries is not None:
                    self._token = self.deliveries.failing(self.chat_id, _failure(exc), self._token)
                if attempt <= FINAL_ATTEMPTS or attempt % 10 == 0:
                    log.warning("chat %s: delivery failed (%s); retrying", self.chat_id, exc)
                pause = 1.0 if attempt < FINAL_ATTEMPTS else min(RETRY_PAUSE_MAX_S, 2.0 ** (attempt - 5))
                await self._pause(pause if failing else 1.0)
        raise TelegramError(f"could not deliver a message to chat {self.chat_id}")

    async def _pause(self, seconds: float) -> None:
        """Wait before the next try, in slices: a stopping application does not wait out a long pause."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while self.keep_trying() and (left := deadline - loop.time()) > 0:  # noqa: ASYNC110  # a plain flag
            await asyncio.sleep(min(left, 1.0))

    async def _deliver_in_pieces(
        self, part: Rendered, exc: BadRequest, markup: InlineKeyboardMarkup | None = None
    ) -> list[int] | None:
        """Telegram counted the text longer than we did (see `_too_long`): resend it in halves; None when it
        cannot be cut smaller."""
        half = utf16_len(part.text) // 2
        pieces = split_rendered(part, half)
        if half < MIN_PIECE or len(pieces) < 2:
            return None
        log.info(
            "chat %s: a message was too long for Telegram (%s); sending it in %d parts",
            self.chat_id,
            exc,
            len(pieces),
        )
        ids: list[int] = []
        for k, piece in enumerate(pieces):
            ids.extend(await self._deliver(piece, None, markup if k == len(pieces) - 1 else None))
        return ids


def _failure(exc: TelegramError) -> str:
    """A failed send as the watchdog shows it (short; the watchdog masks any secret)."""
    text = " ".join(str(exc).split(". Parsing the server response")[0].split())[:120]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _too_long(error_text: str) -> bool:
    """Telegram's 400 for a text over its limit, however this Bot API server words it."""
    text = error_text.lower()
    return "too long" in text or "too_long" in text


STATUS_NOTE_AFTER_S = 2.0  # a step that lasts longer says what it is doing (reading a file, transcribing)
STATUS_NOTE_EVERY_S = 2.0  # how often that note's elapsed time is renewed


@contextlib.asynccontextmanager
async def status_note(
    bot: Bot,
    chat_id: int,
    what: str,
    *,
    thread_id: int | None = None,
    after: float = STATUS_NOTE_AFTER_S,
    every: float = STATUS_NOTE_EVERY_S,
) -> AsyncIterator[None]:
    """While the block runs longer than `after`, a message says "⏳ {what} {elapsed}" (renewed every
    `every` seconds); it is deleted when the block ends. Failures to show it are logged and ignored."""
    done = asyncio.Event()
    started = time.monotonic()

    def line() -> str:
        return f"\u23f3 {what} {elapsed_text(time.monotonic() - started)}"

    async def over(wait: float) -> bool:
        return await wait_event(done, wait)

    async def show() -> None:
        if await over(after):
            return
        message_id: int | None = None
        try:
            shown = line()
            msg = await bot.send_message(chat_id, shown, message_thread_id=thread_id)
            message_id = msg.message_id
            pause = every
            while not await over(pause):
                pause = every
                text = line()
                if text == shown:
                    continue
                try:
                    await bot.edit_message_text(text, chat_id, message_id)
                    shown = text
                except RetryAfter as exc:
                    pause = max(every, _retry_seconds(exc))
        except TelegramError as exc:
            log.info("chat %s: status note failed: %s", chat_id, exc)
        finally:
            if message_id is not None:
                try:
                    await bot.delete_message(chat_id, message_id)
                except TelegramError as exc:
                    log.info("chat %s: status note not deleted: %s", chat_id, exc)

    # Not cancelled at the end but told to finish: a note being sent is then deleted, never left behind.
    task = asyncio.create_task(show())
    try:
        yield
    finally:
        done.set()
        try:
            await task
        except asyncio.CancelledError:
            task.cancel()
            raise


@dataclass
class Typing:
    """When a typing indicator last sent "typing" (monotonic seconds), so a block that follows can wait."""

    last_sent: float | None = None


@contextlib.asynccontextmanager
async def typing_indicator(
    bot: Bot,
    chat_id: int,
    every: float = 4.5,
    last_sent: float | None = None,
    thread_id: int | None = None,
    delay: float = 0.0,
) -> AsyncIterator[Typing]:
    """Show "typing..." (in forum topic `thread_id`) until the block ends; a failing sendChatAction is
    logged and ignored.

    `last_sent`: when a block just before this one sent it (a voice note's transcription before its turn);
    "typing" shows for about 5 s, so the first send waits until `every` has passed since then.
    `delay`: nothing is sent when the block ends sooner than this (TYPING_DELAY_S). The Bot API recommends
    the action only "when a response from the bot will take a noticeable amount of time to arrive"; an
    answer that comes at once needs no indicator, and is spared a request.
    """
    state = Typing(last_sent)

    async def loop() -> None:
        if delay > 0 and state.last_sent is None:
            await asyncio.sleep(delay)
        while True:
            wait = 0.0 if state.last_sent is None else state.last_sent + every - time.monotonic()
            if wait <= 0:
                state.last_sent = time.monotonic()
                try:
                    await bot.send_chat_action(chat_id, ChatAction.TYPING, message_thread_id=thread_id)
                except TelegramError as exc:
                    log.debug("sendChatAction failed: %s", exc)
                wait = every
            await asyncio.sleep(wait)

    task = asyncio.create_task(loop())
    try:
        yield state
    finally:
        task.cancel()
