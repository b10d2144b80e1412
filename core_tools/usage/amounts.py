"""How money, token counts and cap resets read in a message (the gate's refusal and the bot's reports)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from core_tools.usage.caps import Window


def usd(value: float) -> str:
    """Money, compact: $0, $0.0042, $1.25."""
    if value == 0:
        return "$0"
    return f"${value:.4f}" if value < 1 else f"${value:,.2f}"


def fine_usd(value: float) -> str:
    """Money as `usd` writes it, but an amount under $0.0001 with two significant digits ($0.000021)."""
    if 0 < value < 0.0001:
        return f"${value:.{1 - math.floor(math.log10(value))}f}"
    return usd(value)


def tokens_str(n: float) -> str:
    """Token counts, compact: 950, 12.3k, 1.25M."""
    if n < 1000:
        return f"{int(n)}"
    if n < 1_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.2f}M"


def duration(delta: timedelta) -> str:
    """A time left, compact: '5 min', '3 h 5 min', '7 d 4 h' (at least a minute)."""
    minutes = max(1, int(delta.total_seconds() // 60))
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    return f"{hours} h {mins} min" if hours else f"{mins} min"


def describe_reset(w: Window, now: datetime) -> str:
    """'at 00:00 (UTC), in 3 h 5 min' or 'on 1 Dec at 00:00 (UTC), in 7 d 4 h'."""
    local = w.end.astimezone(w.tz)
    when = f"at {local:%H:%M}" if w.name == "today" else f"on {local.day} {local:%b} at {local:%H:%M}"
    return f"{when} ({w.tz.key}), in {duration(w.end - now)}"


def amount(kind: str, value: float) -> str:
    """A cap's figure in its kind: dollars for "cost", else tokens."""
    return usd(value) if kind == "cost" else f"{tokens_str(value)} tokens"
