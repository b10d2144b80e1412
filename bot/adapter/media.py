"""Voice notes, photos and files: Telegram downloads (getFile) in, photos/documents/voice notes out.

What a file becomes (a transcript, an image part, extracted text) is decided in core_tools.media; this
module only talks to Telegram and hands the message, once downloaded, transcribed or read, to the chat's
TurnRunner like a text message (queue, bursts, /stop, the inbox, group rules). Every message gets a stored
row, also when its file cannot be used, so nothing the user sent is lost.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from telegram import Bot, InputFile, Message, Update
from telegram.error import BadRequest, TelegramError
from telegram.ext import Application, MessageHandler, filters

from bot.adapter.context import Ctx
from bot.adapter.groups import frame, is_group, without_mention
from bot.adapter.streaming import status_note, typing_indicator
from bot.adapter.topics import conversation_of, thread_of
from bot.runtime.queue import Incoming, media_of
from bot.runtime.runner import TurnRunner
from bot.runtime.services import Services
from core_tools.agent import TurnInput
from core_tools.errors import BudgetExceeded, MediaError
from core_tools.media import SUPPORTED
from core_tools.media.audio import audio_length
from db.media import NewMediaFile
from db.runtime import Entry
from db.speakers import Speaker

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_DOWNLOAD_BYTES = 20 * 1024 * 1024  # the Bot API's getFile limit
IMAGE_MAX_BYTES = 10 * 1024 * 1024  # the largest photo size at most this big goes to the model
ALBUM_WAIT_S = 1.0  # an album arrives as one update per item: gather them this long into one turn
IMAGE_TYPES = {"image/jpeg", "image/png", "image/webp", "image/gif"}
WHAT_I_READ = f"I understand text, voice notes and audio, photos, and files ({SUPPORTED})."


@dataclass
class _Album:
    """Items of one media group gathered into one turn."""

    update: Update
    context: Ctx
    texts: list[str] = field(default_factory=list)
    media_ids: list[int] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    items: int = 0


def _size_mb(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB"


def _duration(seconds: int) -> str:
    return f"{seconds // 60}:{seconds % 60:02d}"


class MediaHandlers:
    """Handlers of voice, audio, round videos, photos, documents and everything else that is not text."""

    def __init__(self, services: Services, runner: TurnRunner) -> None:
        self.services = services
        self.settings = services.settings
        self.runner = runner  # the same per-chat queue, stop and inbox as text messages
        self.locks = runner.locks  # a message stored without a turn still waits for the running one
        self._albums: dict[str, _Album] = {}

    # ------------------------------------------------------------------ helpers

    def _key(self, update: Update) -> int:
        """The update's conversation: its chat, or its forum topic (bot/adapter/topics.py)."""
        return conversation_of(self.services.conversations.topics, update)

    def _turn(self, update: Update, text: str, media_ids: list[int]) -> TurnInput:
        msg, user, chat = update.effective_message, update.effective_user, update.effective_chat
        assert msg and user and chat
        speaker = Speaker(user.id, self._key(update), str(chat.type), user.first_name, user.username)
        return TurnInput(speaker, text, media_ids=tuple(media_ids))

    def _incoming(
        self,
        update: Update,
        context: Ctx,
        text: str,
        media_ids: list[int],
        *,
        heard: str | None = None,
        speak: bool = False,
        typing_at: float | None = None,
    ) -> Incoming:
        """The message for the chat's TurnRunner; in a group with the speaker and without the @mention."""
        msg, user, chat = update.effective_message, update.effective_user, update.effective_chat
        assert msg and user and chat
        speaker = Speaker(user.id, self._key(update), str(chat.type), user.first_name, user.username)
        entry = Entry(
            speaker,
            # The captions in `text` lost the @name already (_caption); a file's own text stays as it is.
            frame(msg, context.bot.bot, str(chat.type), text, strip_mention=False),
            tg_message_id=msg.message_id,
            media=media_of(media_ids, heard, speak),
            update_id=update.update_id,
        )
        return Incoming(entry, typing_at=typing_at)

    def _record(
        self,
        update: Update,
        kind: str,
        name: str,
        mime: str | None,
        data: bytes | None,
        status: str,
        *,
        size: int | None = None,
        duration_s: int | None = None,
        detail: str | None = None,
    ) -> int:
        user, chat = update.effective_user, update.effective_chat
        assert user and chat and self.services.media is not None
        row = NewMediaFile(
            user_id=user.id,
            chat_id=self._key(update),
            kind=kind,
            file_name=name,
            mime_type=mime,
            status=status,
            size=size or 0,
            duration_s=duration_s,
            detail=detail,
        )
        return self.services.media.record(row, data)

    async def _download(self, context: Ctx, file_id: str, size: int | None) -> bytes:
        """The file's bytes through getFile; MediaError (saying what to do) when Telegram refuses."""
        too_big = (
            "it is {size}, and bots can only download files up to 20 MB from Telegram. Please send a "
            "smaller file (compress or split it)"
        )
        if size is not None and size > MAX_DOWNLOAD_BYTES:
            raise MediaError(too_big.format(size=_size_mb(size)))
        try:
            tg_file = await context.bot.get_file(file_id)
            if tg_file.file_size is not None and tg_file.file_size > MAX_DOWNLOAD_BYTES:
                raise MediaError(too_big.format(size=_size_mb(tg_file.file_size)))
            return bytes(await tg_file.download_as_bytearray())
        except BadRequest as exc:
            if "too big" in str(exc).lower():
                raise MediaError(too_big.format(size="over 20 MB")) from exc
            raise MediaError(f"Telegram did not hand me the file ({exc}); please send it again") from exc
        except TelegramError as exc:
            raise MediaError(f"Telegram did not hand me the file ({exc}); please send it again") from exc

    async def _refuse(self, update: Update, stand_in: str, reply: str, media_ids: list[int]) -> None:
        """Store the message (it gets no answer from the model) and tell the user why."""
        chat = update.effective_chat
        assert chat is not None
        async with self.locks.hold(self._key(update)):
            self.services.agent.record_only(self._turn(update, stand_in, media_ids), "unsupported")
        assert update.effective_message is not None
        await update.effective_message.reply_text(reply)

    # ------------------------------------------------------------------ voice, audio, round videos

    async def audio_in(self, update: Update, context: Ctx) -> None:
        """A voice note, audio file or round video: transcribed, then a normal turn."""
        msg, chat = update.effective_message, update.effective_chat
        assert msg and chat and self.services.media is not None
        kind, item, name = _audio_item(msg)
        duration = int(getattr(item, "duration", 0) or 0)
        mime = getattr(item, "mime_type", None) or ("video/mp4" if kind == "video_note" else "audio/ogg")
        caption = _caption(msg, context)
        label = f"[{kind.replace('_', ' ')}, {_duration(duration)}"
        limit = self.settings.voice_max_seconds
        try:
            data = await self._download(context, item.file_id, item.file_size)
        except MediaError as exc:
            file_id = self._record(
                update,
                kind,
                name,
                mime,
                None,
                "too_big",
                size=item.file_size,
                duration_s=duration,
                detail=str(exc),
            )
            await self._refuse(
                update,
                f"{label}, not transcribed: {exc}]",
                f"I could not take that {kind.replace('_', ' ')}: {exc}.",
                [file_id],
            )
            return
        # The length the audio really has (the declared one is the sender's to write): what the limit
        # is checked against and the transcription reserved and accounted by.
        length = await asyncio.to_thread(audio_length, data, duration, kind, limit)
        seconds = length.seconds
        label = f"[{kind.replace('_', ' ')}, {_duration(seconds)}"
        if seconds > limit:
            said = f" (its app said {_duration(duration)})" if length.understated else ""
            long = f"at least {_duration(seconds)}" if length.at_least else _duration(seconds)
            file_id = self._record(update, kind, name, mime, data, "too_long", duration_s=seconds)
            await self._refuse(
                update,
                f"{label}, not transcribed: longer than {_duration(limit)}]",
                f"That recording is {long} long{said}; I transcribe up to {_duration(limit)} "
                f"(VOICE_MAX_SECONDS). It is saved; please send a shorter one or type the gist.",
                [file_id],
            )
            return
        file_id = self._record(update, kind, name, mime, data, "received", duration_s=seconds)
        audio = self.services.audio
        if audio is None or not audio.can_transcribe:
            self.services.media.rows.set_status(file_id, "kept", "no transcription endpoint")
            await self._refuse(
                update,
                f"{label}, not transcribed: no transcription endpoint]",
                "I cannot listen to voice notes yet: no transcription endpoint is configured. The operator "
                "can set TRANSCRIPTION_MODEL and TRANSCRIPTION_BASE_URL (any OpenAI-compatible "
                "/audio/transcriptions: OpenAI, Groq, or a local speaches/faster-whisper-server). Your voice "
                "note is saved.",
                [file_id],
            )
            return
        assert update.effective_user is not None
        # Transcribed before it queues (it enters the chat's queue once it is text), "typing" meanwhile.
        async with (
            typing_indicator(context.bot, chat.id, thread_id=thread_of(msg)) as typing,
            status_note(
                context.bot,
                chat.id,
                f"transcribing your {kind.replace('_', ' ')}...",
                thread_id=thread_of(msg),
            ),
        ):
            try:
                heard = await audio.transcribe(
                    data, name, seconds, user_id=update.effective_user.id, session_id=None
                )
            except (MediaError, BudgetExceeded) as exc:
                self.services.media.rows.set_status(file_id, "failed", str(exc))
                async with self.locks.hold(self._key(update)):
                    self.services.agent.record_only(
                        self._turn(update, f"{label}, not transcribed: {exc}]", [file_id]), "failed"
                    )
                if isinstance(exc, BudgetExceeded):
                    await msg.reply_text(f"{exc}\nYour voice note is saved.")
                else:
                    await msg.reply_text(
                        f"Sorry, I could not transcribe your voice note: {exc}. The operator can check "
                        "TRANSCRIPTION_BASE_URL, TRANSCRIPTION_API_KEY and TRANSCRIPTION_MODEL. Your voice "
                        "note is saved; send it again once that is fixed, or type your message."
                    )
                return
        if not heard:
            self.services.media.rows.set_status(file_id, "empty", "no words heard")
            async with self.locks.hold(self._key(update)):
                self.services.agent.record_only(
                    self._turn(update, f"{label}, no words heard]", [file_id]), "unsupported"
                )
            await msg.reply_text("I could not hear any words in that recording. Could you say it again?")
            return
        self.services.media.rows.set_status(file_id, "transcribed", None)
        # The transcript is the user's message from now on, exactly like typed text.
        text = f"{heard}\n\n{caption}" if caption else heard
        item = self._incoming(
            update, context, text, [file_id], heard=heard, speak=kind == "voice", typing_at=typing.last_sent
        )
        await self.runner.submit(item)

    async def speak(self, bot: Bot, item: Incoming, answer: str) -> None:
        """The answer to a voice note as a voice note too (TTS_MODEL); a failure leaves the text alone."""
        audio = self.services.audio
        if audio is None or not audio.can_speak:
            return
        try:
            voice = await audio.speak(answer[:4000], user_id=item.user_id)
            place = self.services.conversations.topics.place(item.chat_id)  # a forum topic's: there
            await bot.send_voice(
                place.chat_id, InputFile(voice, filename="answer.ogg"), message_thread_id=place.thread_id
            )
        except (MediaError, BudgetExceeded, TelegramError) as exc:
            log.info("no voice answer for chat %s: %s", item.chat_id, exc)

    # ------------------------------------------------------------------ photos and files

    async def _saying(self, context: Ctx, update: Update, what: str, work: Awaitable[T]) -> T:
        """Await `work`; when it takes a while, a note in the chat says `what` is being done."""
        chat = update.effective_chat
        assert chat is not None
        async with status_note(context.bot, chat.id, what, thread_id=thread_of(update.effective_message)):
            return await work

    async def photo_in(self, update: Update, context: Ctx) -> None:
        """A photo: the largest size under the limit goes to the model with its caption."""
        msg = update.effective_message
        assert msg is not None and msg.photo
        sizes = sorted(msg.photo, key=lambda p: p.width * p.height)
        fitting = [p for p in sizes if (p.file_size or 0) <= IMAGE_MAX_BYTES] or sizes[:1]
        best = fitting[-1]
        await self._gather(
            update,
            context,
            self._photo_part(update, context, best.file_id, best.file_size, "photo.jpg", "image/jpeg"),
        )

    async def document_in(self, update: Update, context: Ctx) -> None:
        """A file: an image goes to the model as a photo, other files as their extracted text."""
        msg = update.effective_message
        assert msg is not None and msg.document is not None
        doc = msg.document
        name = doc.file_name or "file"
        mime = (doc.mime_type or "").lower() or None
        if mime in IMAGE_TYPES:
            part = self._photo_part(update, context, doc.file_id, doc.file_size, name, mime)
        else:
            reading = self._document_part(update, context, doc.file_id, doc.file_size, name, mime)
            part = self._saying(context, update, f"reading {name[:60]}...", reading)
        await self._gather(update, context, part)

    async def _photo_part(
        self, update: Update, context: Ctx, file_id: str, size: int | None, name: str, mime: str | None
    ) -> tuple[str, int | None, str | None]:
        """(text for the turn, media row id, problem) of one image."""
        assert self.services.media is not None and update.effective_user and update.effective_chat
        if size is not None and size > IMAGE_MAX_BYTES:
            row = self._record(update, "image", name, mime, None, "too_big", size=size)
            return (
                f"[image {name!r}: not taken, {_size_mb(size)}]",
                row,
                f"{name}: the image is {_size_mb(size)}; I take images up to {_size_mb(IMAGE_MAX_BYTES)}",
            )
        try:
            data = await self._download(context, file_id, size)
        except MediaError as exc:
            row = self._record(update, "image", name, mime, None, "too_big", size=size, detail=str(exc))
            return f"[image {name!r}: not taken]", row, f"{name}: {exc}"
        row = self.services.media.image(update.effective_user.id, self._key(update), name, mime, data)
        return f"[photo {row}: {name}]", row, None

    async def _document_part(
        self, update: Update, context: Ctx, file_id: str, size: int | None, name: str, mime: str | None
    ) -> tuple[str, int | None, str | None]:
        """(text for the turn, media row id, problem) of one document."""
        assert self.services.media is not None and update.effective_user and update.effective_chat
        try:
            data = await self._download(context, file_id, size)
        except MediaError as exc:
            row = self._record(update, "document", name, mime, None, "too_big", size=size, detail=str(exc))
            return f"[file {name!r}: not received: {exc}]", row, f"{name}: {exc}"
        # Read in a worker held to FILE_READ_* limits; the file's row is kept (and linked) either way.
        read = await self.services.media.document(
            update.effective_user.id, self._key(update), name, mime, data
        )
        if read.block is None:
            return (
                f"[file {name!r}: could not be read: {read.problem}]",
                read.file_id,
                f"{name}: {read.problem}",
            )
        return read.block, read.file_id, None

    async def _gather(self, update: Update, context: Ctx, part: Any) -> None:
        """One item alone is a turn; the items of an album (media_group_id) are one turn together."""
        msg = update.effective_message
        assert msg is not None
        group = msg.media_group_id
        if group is None:
            album = _Album(update, context)
            await self._add(album, msg, part)
            await self._run_album(album)
            return
        first = group not in self._albums
        if first:
            self._albums[group] = _Album(update, context)
        album = self._albums[group]
        await self._add(album, msg, part)
        if not first:
            return
        # The other items of the album arrive as their own updates within a moment.
        await asyncio.sleep(ALBUM_WAIT_S)
        self._albums.pop(group, None)
        await self._run_album(album)

    async def _add(self, album: _Album, msg: Message, part: Any) -> None:
        text, row, problem = await part
        album.items += 1
        caption = _caption(msg, album.context)
        if caption:
            album.texts.append(caption)
        album.texts.append(text)
        if row is not None:
            album.media_ids.append(row)
        if problem is not None:
            album.problems.append(problem)

    async def _run_album(self, album: _Album) -> None:
        update, context = album.update, album.context
        chat = update.effective_chat
        assert chat is not None and update.effective_message is not None
        text = "\n\n".join(album.texts)
        if len(album.problems) >= album.items:  # nothing usable came: no turn, but the message is kept
            await self._refuse(
                update,
                text,
                "I could not use that: " + "; ".join(album.problems) + f".\n{WHAT_I_READ}",
                album.media_ids,
            )
            return
        if album.problems:
            await update.effective_message.reply_text(
                "Part of what you sent could not be used: "
                + "; ".join(album.problems)
                + ". I answer with the rest."
            )
        await self.runner.submit(self._incoming(update, context, text, album.media_ids))

    # ------------------------------------------------------------------ everything else

    async def other_in(self, update: Update, context: Ctx) -> None:
        """Stickers, locations, contacts, videos, polls...: stored, and the user is told what works."""
        msg = update.effective_message
        if msg is None or update.effective_user is None or update.effective_chat is None:
            return
        if msg.sticker is not None:
            what, stand_in = "Stickers", f"[sticker {msg.sticker.emoji or ''}]"
        elif msg.location is not None:
            what = "Locations"
            stand_in = f"[location {msg.location.latitude:.5f}, {msg.location.longitude:.5f}]"
        elif msg.contact is not None:
            what, stand_in = "Contacts", f"[contact {msg.contact.first_name}]"
        elif msg.video is not None or msg.animation is not None:
            what, stand_in = "Videos", "[video]"
        elif msg.poll is not None:
            what, stand_in = "Polls", f"[poll {msg.poll.question}]"
        else:
            what, stand_in = "Messages of this kind", "[unsupported message]"
        await self._refuse(update, stand_in, f"{what} are not supported. {WHAT_I_READ}", [])


def _caption(msg: Message, context: Ctx) -> str:
    """The message's caption; in a group without the bot's @name (how the user called it)."""
    caption = (msg.caption or "").strip()
    if caption and is_group(str(msg.chat.type)):
        caption = without_mention(caption, context.bot.bot)
    return caption


def _audio_item(msg: Message) -> tuple[str, Any, str]:
    """(kind, the Telegram object, a file name) of a voice note, audio file or round video."""
    if msg.voice is not None:
        return "voice", msg.voice, "voice.ogg"
    if msg.audio is not None:
        return "audio", msg.audio, msg.audio.file_name or "audio.mp3"
    assert msg.video_note is not None
    return "video_note", msg.video_note, "video_note.mp4"


def register_media_handlers(app: Application[Any, Any, Any, Any, Any, Any], h: MediaHandlers) -> None:
    """Add the handlers of `h` for everything that is not text or a command (after those handlers); their
    turns go through the turn runner, which also speaks the answers to voice notes (bot/process/fronts.py)."""
    app.add_handler(MessageHandler(filters.VOICE | filters.AUDIO | filters.VIDEO_NOTE, h.audio_in))
    app.add_handler(MessageHandler(filters.PHOTO, h.photo_in))
    app.add_handler(MessageHandler(filters.Document.ALL, h.document_in))
    app.add_handler(MessageHandler(~filters.TEXT & ~filters.StatusUpdate.ALL, h.other_in))
