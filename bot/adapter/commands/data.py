"""`/export` (everything the bot stores about you, as one archive) and `/forget_me` (all of it deleted,
after a confirmation button), in private chats."""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from telegram import InlineKeyboardButton, InlineKeyboardMarkup, Message, Update, User
from telegram.error import TelegramError
from telegram.ext import Application, CallbackQueryHandler, CommandHandler

from bot.adapter.context import Ctx
from bot.runtime.guest import GuestTurns
from bot.runtime.runner import TurnRunner
from bot.runtime.services import Services
from core_tools.backup.manifest import BackupError
from core_tools.backup.userdata import export_user, forget_user, scrub_files, split_file, summary

log = logging.getLogger(__name__)

PRIVATE_ONLY = "Send this in a private chat with me: it is about your own data."


async def _in_private(update: Update) -> tuple[Message, User] | None:
    """The message and its sender of a command about the user's own data; in another chat, None after
    saying where to send it."""
    msg, user = update.effective_message, update.effective_user
    if msg is None or user is None:
        return None
    if msg.chat.type != "private":
        await msg.reply_text(PRIVATE_ONLY)
        return None
    return msg, user


CONFIRM = (
    "This deletes everything I store about you: your conversations, memories, reminders, usage, code runs "
    "and the files you sent. It cannot be undone (backups taken before keep it until they are rotated "
    "out). Send /export first if you want a copy."
)
EXPORT_BUSY = "Your export is being made already: it comes in a moment. Send /export again after it arrived."
ERASE_BUSY = "Your data is being deleted already."
NOT_SCRUBBED = (
    "\n\nThe database file still holds a copy of the deleted data until it is compacted; that is retried "
    "in the next minutes."
)
SCRUB_RETRY_S = 60.0
SCRUB_TRIES = 10


class DataCommands:
    """The handlers of /export and /forget_me."""

    def __init__(
        self, services: Services, runner: TurnRunner | None = None, guests: GuestTurns | None = None
    ) -> None:
        self.services = services
        self.runner = runner
        self.guests = guests  # guest and inline turns (bot/runtime/guest.py): stopped by an erase too
        self.media_dir = Path(services.settings.media_dir)
        self._exporting: set[int] = set()  # one export per user at a time (each takes disk space)
        self._erasing: set[int] = set()
        self._scrubbing: asyncio.Task[None] | None = None

    def _export(self, user_id: int, folder: Path) -> tuple[list[Path], int]:
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        archive = export_user(self.services.engine, self.media_dir, user_id, folder / f"my-data-{stamp}.zip")
        return split_file(archive.path, self.services.settings.backup_part_bytes), archive.files

    async def export(self, update: Update, context: Ctx) -> None:
        """/export: send the user one ZIP of their data (in parts when it is large)."""
        asked = await _in_private(update)
        if asked is None:
            return
        msg, user = asked
        if user.id in self._exporting:
            await msg.reply_text(EXPORT_BUSY)
            return
        self._exporting.add(user.id)
        try:
            await self._send_export(msg, user, context)
        finally:
            self._exporting.discard(user.id)

    async def _send_export(self, msg: Message, user: User, context: Ctx) -> None:
        folder = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="export-"))
        try:
            try:
                parts, files = await asyncio.to_thread(self._export, user.id, folder)
            except BackupError as exc:
                await msg.reply_text(f"Nothing to export: {exc}.")
                return
            note = f"Everything I store about you, with {files} file(s) you sent."
            if len(parts) > 1:
                whole = parts[0].name[:-4]
                note += (
                    f" It is large, so it comes in {len(parts)} parts: join them "
                    f"(cat {whole}.0* > {whole}), then unzip."
                )
            await msg.reply_text(note)
            for part in parts:
                data = await asyncio.to_thread(part.read_bytes)
                await context.bot.send_document(
                    msg.chat_id, document=data, filename=part.name, write_timeout=600, read_timeout=600
                )
        finally:
            await asyncio.to_thread(shutil.rmtree, folder, True)

    async def forget_me(self, update: Update, context: Ctx) -> None:
        """/forget_me: ask for confirmation with a button."""
        asked = await _in_private(update)
        if asked is None:
            return
        msg, user = asked
        buttons = InlineKeyboardMarkup(
            [
                [InlineKeyboardButton("Delete everything", callback_data=f"forget:yes:{user.id}")],
                [InlineKeyboardButton("Cancel", callback_data=f"forget:no:{user.id}")],
            ]
        )
        await msg.reply_text(CONFIRM, reply_markup=buttons)

    async def pressed(self, update: Update, context: Ctx) -> None:
        """The confirmation button: only the user who asked can press it."""
        query = update.callback_query
        if query is None or query.data is None:
            return
        _, choice, owner = query.data.split(":", 2)
        if str(query.from_user.id) != owner:
            await query.answer("Only the person who asked can press this.", show_alert=True)
            return
        await query.answer()
        if choice != "yes":
            await query.edit_message_text("Cancelled: nothing was deleted.")
            return
        user_id = query.from_user.id
        if user_id in self._erasing:
            await query.edit_message_text(ERASE_BUSY)
            return
        self._erasing.add(user_id)
        try:
            async with AsyncExitStack() as quiet:
                # Nothing of theirs runs meanwhile, nor is written after: their turns are stopped and
                # ended, their memory extraction dropped or ended; new ones wait until the erase is done.
                if self.runner is not None:
                    await quiet.enter_async_context(self.runner.quiet(user_id))
                if self.guests is not None:
                    await quiet.enter_async_context(self.guests.quiet(user_id))
                await quiet.enter_async_context(self.services.extractor.forget(user_id))
                erased = await asyncio.to_thread(forget_user, self.services.engine, self.media_dir, user_id)
        except Exception:
            log.exception("erasing the data of user %s failed", user_id)
            await query.edit_message_text(
                "Deleting failed on my side; nothing was deleted. Please try again later."
            )
            return
        finally:
            self._erasing.discard(user_id)
        log.info("user %s erased their data: %d row(s), %d file(s)", user_id, erased.total, len(erased.media))
        lines = list(summary(erased))
        text = "Done. I deleted everything I stored about you:\n" + "\n".join(f"- {line}" for line in lines)
        if not lines:
            text = "There was nothing stored about you."
        if not erased.scrubbed:
            text += NOT_SCRUBBED
            self._scrub_later()
        try:
            await query.edit_message_text(text)
        except TelegramError:
            await context.bot.send_message(user_id, text)

    def _scrub_later(self) -> None:
        """Try the scrub of the database's files again (another connection held the WAL)."""
        if self._scrubbing is None or self._scrubbing.done():
            self._scrubbing = asyncio.get_running_loop().create_task(self._scrub_again())

    async def _scrub_again(self) -> None:
        for _ in range(SCRUB_TRIES):
            await asyncio.sleep(SCRUB_RETRY_S)
            if await asyncio.to_thread(scrub_files, self.services.engine):
                log.info("erase: the database's files are scrubbed now")
                return
        log.warning(
            "erase: the WAL could not be truncated after %d tries; it is at the next erase", SCRUB_TRIES
        )


def register_data_commands(
    app: Application[Any, Any, Any, Any, Any, Any],
    services: Services,
    runner: TurnRunner | None = None,
    guests: GuestTurns | None = None,
) -> None:
    """Add /export, /forget_me and the confirmation button (`runner`, `guests`: the turns an erase stops
    first)."""
    commands = DataCommands(services, runner, guests)
    app.add_handler(CommandHandler("export", commands.export))
    app.add_handler(CommandHandler("forget_me", commands.forget_me))
    app.add_handler(CallbackQueryHandler(commands.pressed, pattern=r"^forget:"))
