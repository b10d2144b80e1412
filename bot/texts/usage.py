"""What /usage and /budget answer: a user's usage, the owner's everyone's and the caps; core_tools.usage
does the work and bot/texts/usage_report.py words the reports."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.config.args import parse_decimal, parse_user_id
from bot.texts.usage_report import format_all, format_budgets, format_report
from core_tools.usage.caps import PERIODS, REPORT_PERIODS
from core_tools.usage.service import UsageService

USAGE_HELP = "Usage: /usage [today|week|month] (the owner also: /usage all [today|week|month])"
BUDGET_HELP = (
    "Usage: /budget USER_ID daily|monthly AMOUNT\n"
    "AMOUNT: 2.00 or $2 (USD), 50000 tokens or 50k tokens, off (no cap), default (back to the default); "
    "off and default take an optional usd|tokens.\n"
    "/budget shows all caps; /budget USER_ID shows one user's."
)


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
