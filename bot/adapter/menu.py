"""What Telegram shows about the bot: a command menu per audience, and its descriptions where none is set.

Telegram picks the menu of a chat from the most specific scope set (Bot API, "Determining list of
commands"): in the owner's private chat its own scope (the private list and the owner's commands), in other
private chats the all-private-chats scope, in groups the all-group-chats scope. The default scope gets the
private list too, replacing whatever an older version published there. Every process publishes the same
lists at start: with several processes that is the same few requests again, never a different result.
"""

from __future__ import annotations

import asyncio
import logging

from telegram import (
    Bot,
    BotCommand,
    BotCommandScope,
    BotCommandScopeAllGroupChats,
    BotCommandScopeAllPrivateChats,
    BotCommandScopeChat,
    BotCommandScopeDefault,
)
from telegram.error import TelegramError

from bot.texts.catalog import DESCRIPTION, SHORT_DESCRIPTION, Audience, menu_for

log = logging.getLogger(__name__)


def menus(owner_id: int | None) -> list[tuple[BotCommandScope, Audience]]:
    """Each scope the bot sets a command list for, with the audience whose list it gets."""
    scopes: list[tuple[BotCommandScope, Audience]] = [
        (BotCommandScopeDefault(), Audience.PRIVATE),
        (BotCommandScopeAllPrivateChats(), Audience.PRIVATE),
        (BotCommandScopeAllGroupChats(), Audience.GROUP),
    ]
    if owner_id is not None:
        scopes.append((BotCommandScopeChat(owner_id), Audience.OWNER))
    return scopes


async def _set_commands(bot: Bot, scope: BotCommandScope, audience: Audience) -> None:
    commands = [BotCommand(name, description) for name, description in menu_for(audience)]
    try:
        await bot.set_my_commands(commands, scope=scope)
    except TelegramError as exc:  # non-essential: the commands still work when typed
        log.warning("setMyCommands for %s failed: %s", scope.type, exc)


async def _describe(bot: Bot) -> None:
    """Set the descriptions only where they are empty: what the operator set in BotFather stays."""
    try:
        if not (await bot.get_my_description()).description:
            await bot.set_my_description(DESCRIPTION)
            log.info("set the bot's description (it had none)")
    except TelegramError as exc:
        log.warning("could not check or set the bot's description: %s", exc)
    try:
        if not (await bot.get_my_short_description()).short_description:
            await bot.set_my_short_description(SHORT_DESCRIPTION)
            log.info("set the bot's short description (it had none)")
    except TelegramError as exc:
        log.warning("could not check or set the bot's short description: %s", exc)


async def publish(bot: Bot, owner_id: int | None) -> None:
    """One round at start: the command menus and the missing descriptions; failures are logged only."""
    await asyncio.gather(
        *(_set_commands(bot, scope, audience) for scope, audience in menus(owner_id)), _describe(bot)
    )
