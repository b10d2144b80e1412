"""/usage and /budget: the Telegram side of usage and cost control (with /usage's chart); core_tools.usage
does the work and bot/texts/usage.py words the replies."""

from __future__ import annotations

import logging
from typing import Any

from telegram import Update
from telegram.ext import Application, CommandHandler

from bot.adapter.chart_replies import ChartReplies
from bot.adapter.context import Ctx
from bot.adapter.render import plain_chunks
from bot.texts.usage import budget_reply, usage_reply
from bot.texts.usage_report import window_label
from core_tools.usage.caps import REPORT_PERIODS, window
from core_tools.usage.service import UsageService

log = logging.getLogger(__name__)


MAX_TEXT = 4000  # under Telegram's 4096


def chart_period(args: list[str]) -> str | None:
    """The period whose chart `/usage ARGS` answers with (the user's own usage), else None."""
    words = [a.lower() for a in args]
    if len(words) > 1 or (words and words[0] not in REPORT_PERIODS):
        return None
    return words[0] if words else "today"


def usage_chart(service: UsageService, user_id: int, period: str) -> bytes | None:
    """/usage's chart of the period (PNG), None when there was no usage; blocking: run in a thread."""
    series = service.usage_over_time(user_id, period=period)
    if series.empty:
        return None
    from bot.adapter import charts  # the plotting module loads with the first chart, never with a plain turn

    w = window(period, service.clock(), service.timezone(user_id))
    return charts.usage_png(series, f"Usage {window_label(w)}")


class UsageHandlers:
    """The /usage and /budget handlers."""

    def __init__(self, service: UsageService) -> None:
        self.service = service
        self.charts = ChartReplies()

    async def _reply(self, update: Update, text: str) -> None:
        assert update.effective_message
        for part in plain_chunks(text, MAX_TEXT):  # counted in UTF-16 units, as Telegram does
            await update.effective_message.reply_text(part)

    async def usage(self, update: Update, context: Ctx) -> None:
        """/usage [today|week|month], /usage all [period] (owner)."""
        assert update.effective_user and update.effective_message
        user_id, args = update.effective_user.id, context.args or []
        text = usage_reply(self.service, user_id, args)
        period = chart_period(args)
        if period is None:
            await self._reply(update, text)
            return
        await self.charts.reply(
            update.effective_message,
            text,
            lambda: usage_chart(self.service, user_id, period),
            f"Tokens and estimated cost per {'hour' if period == 'today' else 'day'}",
        )

    async def budget(self, update: Update, context: Ctx) -> None:
        """/budget [USER_ID [daily|monthly AMOUNT|off|default [usd|tokens]]] (owner only)."""
        assert update.effective_user
        await self._reply(update, budget_reply(self.service, update.effective_user.id, context.args or []))


def register_usage_handlers(app: Application[Any, Any, Any, Any, Any, Any], service: UsageService) -> None:
    """Add /usage and /budget; call it before any catch-all command handler."""
    handlers = UsageHandlers(service)
    app.add_handler(CommandHandler("usage", handlers.usage))
    app.add_handler(CommandHandler("budget", handlers.budget))
