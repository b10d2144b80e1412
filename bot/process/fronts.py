"""The front ends' composition roots: the Telegram bot and the terminal chat, each built once in dependency
order around the services (bot/process/wiring.py, `build_services`), which are given the front end's outlets
and events at construction."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from bot.config.settings import Settings
from bot.process.upgrade.start import ensure_schema
from bot.process.wiring import FrontEnd, Outlets, build_services, build_webapp
from bot.runtime.replica import ReplicaEvents
from bot.runtime.services import Services
from db.topics import Topics

if TYPE_CHECKING:
    from bot.adapter.context import App
    from bot.terminal.chat import TerminalChat


def build_telegram(settings: Settings, adjust: Callable[[Services], None] | None = None) -> App:
    """The Telegram bot, built once in dependency order: its Bot API client and job queue, the services
    (delivering through that bot), the handlers and the turn runner, the media handlers, the schedule runner,
    the backups, the app's web server, then the PTB Application whose typed bot data holds them.

    The services reach what is built after them through closures (the replica drives chats through the turn
    runner, which nothing asks of before the application runs; the schedule tool wakes the schedule runner,
    once it exists).
    `adjust` sees the services before anything else takes them (tests replace a part)."""
    from bot.adapter.app import Handlers, build_application, drive, telegram_bot
    from bot.adapter.context import BotData
    from bot.adapter.front import TelegramFront
    from bot.adapter.jobs import JobQueueTimer, new_job_queue
    from bot.adapter.media import MediaHandlers
    from bot.adapter.notify import TelegramNotifier
    from bot.adapter.outbox import TelegramOutbox
    from bot.adapter.outfiles import TelegramFiles
    from bot.adapter.telegram_http import PollingRequest
    from bot.runtime.backup_jobs import BackupJobs
    from bot.runtime.checkin_jobs import CheckinDelivery
    from bot.runtime.schedule_jobs import ScheduleRunner
    from bot.runtime.vigil import Deliveries
    from bot.texts.checkin import compose as compose_checkin

    polling = PollingRequest(connection_pool_size=1)
    bot = telegram_bot(settings, polling)
    job_queue = new_job_queue()
    handlers: Handlers
    media: MediaHandlers
    schedule_runner: ScheduleRunner | None = None
    app: App

    def wake() -> None:
        # A schedule made before the runner exists (a test's setup, `adjust`) is found when it starts.
        if schedule_runner is not None:
            schedule_runner.wake()

    def outlets(topics: Topics) -> Outlets:
        return Outlets(TelegramNotifier(topics, bot), TelegramFiles(topics, bot), wake)

    def stop_here(chat_id: int, turn: int) -> None:
        handlers.runner.stop_here(chat_id, turn)

    events = ReplicaEvents(
        on_orphan=lambda chat_id: drive(app, handlers.runner, chat_id),
        on_stop=stop_here,
        on_lost=lambda chat_id: handlers.runner.lost(chat_id),
        running_turns=lambda: handlers.runner.running(),
        free_chats=lambda: handlers.runner.free(),
    )
    ensure_schema(settings)  # a database behind this code: the checked upgrade (UpgradeFailed)
    services = build_services(settings, FrontEnd(outlets, events))
    if adjust is not None:
        adjust(services)
    # The answer to a voice note is spoken too (bot/adapter/media.py): the media handlers share the runner.
    front = TelegramFront(
        bot,
        services.conversations.topics,
        edit_interval_s=settings.stream_edit_interval_s,
        typing_delay_s=settings.typing_delay_s,
        speak=lambda item, text: media.speak(bot, item, text),
        deliveries=(deliveries := Deliveries()),
        answer_retry_s=settings.answer_retry_s,
        keep_trying=lambda: app.running,  # (a stopping application does not wait an hour for a send)
    )
    handlers = Handlers(services, front)
    media = MediaHandlers(services, handlers.runner)
    # Reminders, task answers and the owner's notices outside a turn; a task's turn waits for its chat.
    outbox = TelegramOutbox(bot, services.conversations.topics)
    # A task's turn goes through the chats' turn runner: it waits for its chat like a message.
    checkins = (
        CheckinDelivery(services, services.checkins, outbox, compose_checkin)
        if services.checkins is not None
        else None
    )
    schedule_runner = ScheduleRunner(
        services, outbox, handlers.runner.quiet_turn, JobQueueTimer(job_queue), checkins
    )
    data = BotData(
        services=services,
        runner=handlers.runner,
        access=handlers.access,
        schedule_runner=schedule_runner,
        backups=BackupJobs(services, outbox),
        webapp=build_webapp(services),
        polling=polling,
        deliveries=deliveries,
    )
    app = build_application(data, handlers, media, bot, job_queue)
    return app


def build_terminal(settings: Settings, user_id: int, out_dir: Path) -> TerminalChat:
    """The terminal chat as `user_id`: its console and the reminders' wake-up are made first, and the services
    deliver to them (code jobs' notices, a cap's notice to the owner, the files code runs write to
    `out_dir`)."""
    from bot.terminal.chat import TerminalChat
    from bot.terminal.console import Console
    from bot.terminal.delivery import TerminalFiles, TerminalNotifier

    console = Console()
    woken = asyncio.Event()  # the schedule tool rings it; the terminal's reminders wait on it

    def outlets(topics: Topics) -> Outlets:
        notifier = TerminalNotifier(console, user_id)
        return Outlets(notifier, TerminalFiles(out_dir, console), woken.set)

    ensure_schema(settings)
    services = build_services(settings, FrontEnd(outlets))
    return TerminalChat(services, user_id, out_dir, console, woken)
