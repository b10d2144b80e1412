"""Files of a code run to the chat: images as photos, everything else as documents."""

from __future__ import annotations

import logging

from telegram import Bot, InputFile
from telegram.error import BadRequest, TelegramError

from core_tools.types import OutputFile
from db.topics import Place, Topics

log = logging.getLogger(__name__)


class TelegramFiles:
    """Implements core_tools' FileSink: files of a code run go to the chat, images as photos."""

    def __init__(self, topics: Topics | None = None) -> None:
        self.bot: Bot | None = None
        self.topics = topics  # where a forum topic's conversation key is answered

    async def send_files(self, chat_id: int, files: list[OutputFile]) -> list[str]:
        """Send each file to the chat (or forum topic); a line per file that could not be sent."""
        if self.bot is None:
            return [f"{f.name}: the bot is not started" for f in files]
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
        return failed
