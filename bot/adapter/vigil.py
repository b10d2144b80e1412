"""The watchdog (bot/runtime/vigil/) in the Telegram process: the runtime's conditions, plus what only the
adapter knows: the long poll's state (its own watchdog, bot/adapter/watchdog.py, restarts it and tells the
owner), the webhook's getWebhookInfo in webhook mode, and the owner's chat to tell once a condition clears."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

from telegram import Update
from telegram.ext import TypeHandler

from bot.adapter.watchdog import PollWatchdog
from bot.runtime.vigil import Condition, Vigil
from bot.runtime.vigil.alert import AlertWebhook
from bot.runtime.vigil.conditions import Reading, WebhookWatch
from bot.runtime.vigil.probes import (
    POLLING,
    WEBHOOK,
    lease_condition,
    sandbox_addresses,
    sandbox_condition,
    sending_condition,
    undelivered_condition,
)
from db.watchdog_events import WatchdogEvents

if TYPE_CHECKING:
    from bot.adapter.context import App, Ctx

log = logging.getLogger(__name__)

WEBHOOK_STALL_S = 90.0  # when WATCHDOG_POLL_STALL_S is 0: how long updates may wait with none arriving


def poll_condition(dog: PollWatchdog) -> Condition:
    """The long poll's stall as its watchdog sees it (that one logs it, restarts the poller and tells)."""

    async def probe(now: float) -> Reading | None:
        since = dog.health.stalled_since
        if since is None:
            return None
        request = dog.request
        cause = "no getUpdates succeeded"
        if request.last_failure:
            cause += f" ({request.failures} failed, the last: {request.last_failure})"
        return Reading(now - (request.clock() - since), cause)

    return Condition(POLLING, probe, announce=False)


class Arrivals:
    """Counts the updates that reach this process (its first handler group)."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self, update: object, context: Ctx) -> None:
        self.count += 1


def webhook_condition(app: App, every_s: float, after_s: float) -> Condition:
    """Webhook mode: updates waiting at Telegram while none arrives for `after_s` (getWebhookInfo every
    `every_s`), with Telegram's last error."""
    arrivals = Arrivals()
    app.add_handler(TypeHandler(Update, arrivals), group=-4)
    watch = WebhookWatch()

    async def probe(now: float) -> Reading | None:
        info = await app.bot.get_webhook_info()
        age = None
        if info.last_error_date is not None:
            when = info.last_error_date
            age = max(0.0, time.time() - (when if isinstance(when, int | float) else when.timestamp()))
        return watch.observe(now, info.pending_update_count, arrivals.count, info.last_error_message, age)

    return Condition(WEBHOOK, probe, after_s=after_s, every_s=every_s)


def process_vigil(app: App, dog: PollWatchdog | None = None, *, webhook: bool = False) -> Vigil | None:
    """The watchdog of `app`'s process (None when WATCHDOG_TICK_S=0): `dog` is the long poll's."""
    data = app.bot_data
    services = data.services
    settings = services.settings
    if settings.watchdog_tick_s <= 0:
        return None
    owner = settings.owner_id

    async def tell(text: str) -> None:
        if owner is not None:
            await app.bot.send_message(owner, text)

    url = settings.alert_webhook_url
    vigil = Vigil(
        tick_s=settings.watchdog_tick_s,
        process=services.replica.id,
        events=WatchdogEvents(services.engine),
        health_file=Path(settings.health_file) if settings.health_file else None,
        tell=tell,
        alert=AlertWebhook(url.get_secret_value()) if url is not None else None,
        label="assistant bot",
        secrets=settings.secrets(),
    )
    if dog is not None:
        vigil.add(poll_condition(dog))
    if webhook and settings.watchdog_webhook_s > 0:
        after = settings.watchdog_poll_stall_s or WEBHOOK_STALL_S
        vigil.add(
            webhook_condition(app, settings.watchdog_webhook_s, max(after, settings.watchdog_webhook_s))
        )
    if data.deliveries is not None and settings.watchdog_undelivered_s > 0:
        vigil.add(undelivered_condition(data.deliveries, settings.watchdog_undelivered_s))
    if settings.watchdog_sending_s > 0:
        vigil.add(sending_condition(data.schedule_runner, settings.watchdog_sending_s))
    vigil.add(lease_condition(services.replica))
    addresses = sandbox_addresses(settings)
    if addresses and settings.watchdog_sandbox_ping_s > 0:
        token = settings.code_sandbox_token
        secret = token.get_secret_value() if token is not None else None
        vigil.add(sandbox_condition(addresses, secret, settings.watchdog_sandbox_ping_s))
    return vigil


def watch_process(app: App, dog: PollWatchdog | None = None, *, webhook: bool = False) -> Vigil | None:
    """Start `app`'s watchdog once it has started (its post_init hook) and stop it with it (post_stop)."""
    vigil = process_vigil(app, dog, webhook=webhook)
    if vigil is None:
        return None
    startup, stopping = app.post_init, app.post_stop

    async def post_init(application: App) -> None:
        if startup is not None:
            await startup(application)
        vigil.start()

    async def post_stop(application: App) -> None:
        await vigil.aclose()
        if stopping is not None:
            await stopping(application)

    app.post_init = post_init
    app.post_stop = post_stop
    return vigil


__all__ = ["Arrivals", "poll_condition", "process_vigil", "watch_process", "webhook_condition"]
