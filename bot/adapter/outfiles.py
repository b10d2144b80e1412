"""Files of a code run to the chat: images as photos, everything else as documents; and what was not sent."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from telegram import Bot, InputFile
from telegram.error import BadRequest, TelegramError

from bot.adapter.streaming import StreamingReply
from core_tools.types import OutputFile
from db.topics import Place, Topics

log = logging.getLogger(__name__)

NOTE_LINES = 20  # files named in the "not sent" note; the rest are counted
NOTE_LINE_CHARS = 200


class TelegramFiles:
    """Implements core_tools' FileSink: files of a code run go to the chat, images as photos."""

    def __init__(self, topics: Topics | None, bot: Bot) -> None:
        self.bot = bot
        self.topics = topics  # where a forum topic's conversation key is answered

    async def send_files(
        self, chat_id: int, files: list[OutputFile], skipped: Sequence[str] = ()
    ) -> list[str]:
        """Send each file to the chat (or forum topic), then one note naming the files not sent and why; a
        line per file that failed."""
        place = self.topics.place(chat_id) if self.topics is not None else Place(chat_id)
        thread = place.thread_id
        failed: list[str] = []
        for f in files:
            try:
                if f.is_image:
                    try:
                        await self.bot.send_photo(
                            place.chat_id,
                            InputFile(f.data, filename=f.name),
                            caption=f.name,
                            message_thread_id=thread,
                        )
                        continue
                    except BadRequest as exc:  # e.g. dimensions Telegram refuses for a photo: send the file
                        log.info("photo %s refused (%s); sending it as a document", f.name, exc)
                await self.bot.send_document(
                    place.chat_id, InputFile(f.data, filename=f.name), message_thread_id=thread
                )
            except TelegramError as exc:
                log.warning("could not send %s to chat %s: %s", f.name, chat_id, exc)
                failed.append(f"{f.name}: Telegram refused it ({exc})")
        if skipped or failed:
            await self._tell(self.bot, place, [*skipped, *failed])
        return failed

    @staticmethod
    async def _tell(bot: Bot, place: Place, lines: list[str]) -> None:
        """The user learns which files the code wrote that did not come, and why (plain text: names are
        the code's, not Markdown)."""
        shown = [
            line if len(line) <= NOTE_LINE_CHARS else line[: NOTE_LINE_CHARS - 1] + "…" for line in lines
        ]
        if len(shown) > NOTE_LINES:
            shown = [*shown[:NOTE_LINES], f"… and {len(lines) - NOTE_LINES} more"]
        text = "Files the code wrote that were not sent:\n" + "\n".join(f"• {line}" for line in shown)
        try:
            await StreamingReply(bot, place.chat_id, thread_id=place.thread_id).finish_plain(text)
        except TelegramError as exc:
            log.warning("could not tell chat %s about files not sent: %s", place.chat_id, exc)
