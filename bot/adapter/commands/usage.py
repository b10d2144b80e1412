"""/usage and /budget: the Telegram side of usage and cost control; core_tools.usage does the work and
bot/adapter/commands/usage_report.py words the replies."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any

from telegram import Update
from telegram.ext import Application, CommandHandler

from bot.adapter.chart_replies import ChartReplies
from bot.adapter.commands.usage_report import format_all, format_budgets, format_report, window_label
from bot.adapter.context import Ctx
from bot.adapter.render import plain_chunks
from bot.config.args import parse_decimal, parse_user_id
from core_tools.usage.caps import PERIODS, REPORT_PERIODS, window
from core_tools.usage.service import UsageService

log = logging.getLogger(__name__)


USAGE_HELP = "Usage: /usage [today|week|month] (the owner also: /usage all [today|week|month])"
BUDGET_HELP = (
    "Usage: /budget USER_ID daily|monthly AMOUNT\n"
    "AMOUNT: 2.00 or $2 (USD), 50000 tokens or 50k tokens, off (no cap), default (back to the default); "
    "off and default take an optional usd|tokens.\n"
    "/budget shows all caps; /budget USER_ID shows one user's."
)
MAX_TEXT = 4000  # under Telegram's 4096


@dataclass(frozen=True)
class BudgetChange:
    """A parsed `/budget USER_ID PERIOD AMOUNT [KIND]`: `action` is "set", "off" or "default"."""

    user_id: int
    period: str
    action: str
    kind: str | None
    limit: float | None


_AMOUNT = re.compile(r"^\$?([0-9.]+)([km]?)(usd|\$|tokens?)?$", re.ASCII)
MAX_USD = 1_000_000.0  # a cap above these is no cap: say "off"
MAX_TOKENS = 10**12


def parse_budget_change(args: list[str]) -> BudgetChange | None:
    """Parse `/budget` arguments that change a cap; None when they do not make sense."""
    user_id = parse_user_id(args[0]) if len(args) in (3, 4) else None
    period = args[1].lower() if user_id is not None else ""
    if user_id is None or period not in PERIODS:
        return None
    words = [w.lower() for w in args[2:]]
    if words[0] in ("off", "none", "default", "reset"):
        action = "off" if words[0] in ("off", "none") else "default"
        kind = None
        if len(words) == 2:
            kind = {"usd": "cost", "$": "cost", "cost": "cost", "tokens": "tokens", "token": "tokens"}.get(
                words[1]
            )
            if kind is None:
                return None
        return BudgetChange(user_id, period, action, kind, None)
    m = _AMOUNT.match("".join(words))
    if m is None:
        return None
    scale, unit = m.group(2), m.group(3)
    is_tokens = bool(scale) or (unit or "").startswith("token")
    if is_tokens and (unit in ("usd", "$") or "".join(words).startswith("$")):
        return None  # "$50k" or "50k usd": ambiguous, say how to write it
    if is_tokens:
        number = parse_decimal(m.group(1), 0, MAX_TOKENS / _SCALE[scale])
        if number is None:
            return None
        return BudgetChange(user_id, period, "set", "tokens", float(round(number * _SCALE[scale])))
    number = parse_decimal(m.group(1), 0, MAX_USD)
    return None if number is None else BudgetChange(user_id, period, "set", "cost", number)


_SCALE = {"": 1, "k": 1_000, "m": 1_000_000}


def usage_reply(service: UsageService, user_id: int, args: list[str]) -> str:
    """What /usage [today|week|month] and the owner's /usage all [period] answer."""
    words = [a.lower() for a in args]
    everyone = bool(words) and words[0] == "all"
    if everyone:
        words = words[1:]
    if len(words) > 1 or (words and words[0] not in REPORT_PERIODS):
        return USAGE_HELP
    period = words[0] if words else "today"
    if everyone:
        if not service.is_owner(user_id):
            return "Only the owner can see everyone's usage. /usage shows yours."
        return format_all(service.usage_of_all(period))
    return format_report(service.report(user_id, period), service.clock())


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


def budget_reply(service: UsageService, user_id: int, args: list[str]) -> str:
    """What /budget [USER_ID [daily|monthly AMOUNT|off|default [usd|tokens]]] answers (owner only)."""
    if not service.is_owner(user_id):
        return "Only the owner can see and set usage caps. /usage shows yours."
    if not args:
        return f"{format_budgets(service)}\n\n{BUDGET_HELP}"
    if len(args) == 1:
        target = parse_user_id(args[0])
        return BUDGET_HELP if target is None else format_budgets(service, target)
    change = parse_budget_change(args)
    if change is None:
        return BUDGET_HELP
    if change.action == "default":
        service.reset_cap(user_id=change.user_id, period=change.period, kind=change.kind)
    else:
        service.set_cap(
            by=user_id, user_id=change.user_id, period=change.period, kind=change.kind, limit=change.limit
        )
    known = "" if service.queries.users([change.user_id]) else "\n(This user has not talked to me yet.)"
    return f"Done.\n{format_budgets(service, change.user_id)}{known}"


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


__all__ = [
    "BUDGET_HELP",
    "USAGE_HELP",
    "BudgetChange",
    "UsageHandlers",
    "budget_reply",
    "parse_budget_change",
    "register_usage_handlers",
    "usage_reply",
]
