"""Numbers in command arguments: ASCII digits only, within bounds, or None (the caller shows its usage line).

`str.isdigit` and `int()` accept any Unicode digit ("³", "٣") and any size; a float can overflow to inf.
Every command parses its numbers here so that odd input gets the command's usage line, not an apology.
"""

from __future__ import annotations

import re

MAX_DIGITS = 18  # below 2**63: fits SQLite's INTEGER and keeps int() cheap
TELEGRAM_ID_MAX = 2**53  # Telegram ids have at most 52 significant bits

_INT = re.compile(rf"[0-9]{{1,{MAX_DIGITS}}}", re.ASCII)
_DECIMAL = re.compile(rf"[0-9]{{1,{MAX_DIGITS}}}(?:\.[0-9]{{1,6}})?", re.ASCII)


def parse_int(text: str, low: int, high: int) -> int | None:
    """A whole number written in ASCII digits, between `low` and `high` inclusive; None otherwise."""
    if not _INT.fullmatch(text):
        return None
    value = int(text)
    return value if low <= value <= high else None


def parse_decimal(text: str, low: float, high: float) -> float | None:
    """A number like 2 or 2.50 in ASCII digits, between `low` and `high` inclusive; None otherwise."""
    if not _DECIMAL.fullmatch(text):
        return None
    value = float(text)
    return value if low <= value <= high else None


def parse_user_id(text: str) -> int | None:
    """A Telegram user id (a positive whole number); None otherwise."""
    return parse_int(text, 1, TELEGRAM_ID_MAX)
