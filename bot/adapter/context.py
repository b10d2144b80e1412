"""What every handler and job of the Telegram application reads from its context: `context.bot_data`, typed.

The composition root (bot/process/fronts.py, `build_telegram`) builds these objects before the PTB Application
and binds them to a subclass of `BotData` (`bound`): PTB instantiates bot_data with no arguments."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Protocol

from telegram.ext import Application, CallbackContext, ExtBot, JobQueue

if TYPE_CHECKING:
    from bot.adapter.groups import Access
    from bot.adapter.telegram_http import PollingRequest
    from bot.runtime.backup_jobs import BackupJobs
    from bot.runtime.runner import TurnRunner
    from bot.runtime.schedule_jobs import ScheduleRunner
    from bot.runtime.services import Services
    from bot.runtime.vigil import Deliveries


class Server(Protocol):
    """A server that runs with the bot (the app's web server, bot/webapp/server.py): started once the bot
    runs, stopped before the services close."""

    async def start(self) -> None:
        """Start serving; OSError when it cannot listen."""

    async def stop(self) -> None:
        """Stop serving."""


@dataclass(frozen=True)
class BotData:
    """The Telegram application's objects, built once by the composition root."""

    services: Services
    runner: TurnRunner  # the chats' turns (bot/runtime/runner.py)
    access: Access  # who is served where (bot/adapter/groups.py)
    schedule_runner: ScheduleRunner
    backups: BackupJobs
    # The app's web server (WEBAPP_LISTEN), started with the bot; None when it is not set up.
    webapp: Server | None = None
    # The getUpdates request, which the long poll's watchdog watches (bot/adapter/watchdog.py).
    polling: PollingRequest | None = None
    # The answers whose sends keep failing, which the watchdog reads (bot/runtime/vigil/).
    deliveries: Deliveries | None = None


def bound(data: BotData) -> type[BotData]:
    """A BotData class whose instances (PTB makes one, with no arguments) are `data`'s copy."""

    class Bound(BotData):
        def __init__(self) -> None:
            super().__init__(**{f.name: getattr(data, f.name) for f in fields(data)})

    return Bound


# The context of every handler, error handler and job callback.
Ctx = CallbackContext[ExtBot[None], dict[Any, Any], dict[Any, Any], BotData]
# The Telegram application, with that context.
App = Application[ExtBot[None], Ctx, dict[Any, Any], dict[Any, Any], BotData, JobQueue[Ctx]]
