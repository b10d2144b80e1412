"""What /codestats and /codefailures answer: the user's own code runs, from the execution log."""

from __future__ import annotations

from datetime import timedelta

from bot.config.args import parse_int
from core_tools.code.patterns import example
from db.executions import Executions
from db.models import utcnow

STATS_USAGE = "Usage: /codestats [days], where days is a whole number from 1 to 365 (default 7)."
FAILURES_USAGE = "Usage: /codefailures [n], where n is a whole number from 1 to 20 (default 5)."


def parse_count(args: list[str], default: int, low: int, high: int) -> int | None:
    """The single optional integer argument of a command, or None when it is not valid."""
    if not args:
        return default
    if len(args) > 1:
        return None
    return parse_int(args[0], low, high)


def stats_days(args: list[str]) -> int | None:
    """The days of `/codestats ARGS` (7 when not given), None when they are not valid."""
    return parse_count(args, 7, 1, 365)


def _fence(text: str) -> str:
    """A fence longer than any backtick run inside the text, so the block cannot be closed early."""
    ticks = 3
    while "`" * ticks in text:
        ticks += 1
    return "`" * ticks


def _block(text: str, lang: str = "") -> str:
    fence = _fence(text)
    return f"{fence}{lang}\n{text}\n{fence}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "\n…"


def codestats_reply(executions: Executions, user_id: int, args: list[str]) -> str:
    """What /codestats [days] answers."""
    days = stats_days(args)
    if days is None:
        return STATS_USAGE
    since = utcnow() - timedelta(days=days)
    s = executions.stats(user_id, since)
    period = "day" if days == 1 else f"{days} days"
    if s.total == 0:
        return f"No code runs in the last {period}."
    lines = [
        f"Code runs in the last {period}",
        f"Total: {s.total} · succeeded: {s.succeeded} · failed: {s.failed}",
        f"Duration: average {s.avg_ms or 0:.0f} ms · p95 {s.p95_ms or 0} ms",
    ]
    if s.categories:
        top = s.categories[:5]
        lines.append("Top errors: " + ", ".join(f"{name} {count}" for name, count in top))
        # One short example each: the failing line (when the error names it) and the error, from the
        # latest failure of that category.
        examples = executions.category_examples(user_id, since)
        for name, _ in top:
            run = examples.get(name)
            if run is not None:
                lines.append(f"• {name}: {example(run.code, run.stderr, run.language, run.error_category)}")
    return "\n".join(lines)


def codefailures_replies(executions: Executions, user_id: int, args: list[str]) -> tuple[list[str], bool]:
    """What /codefailures [n] answers: the messages, and whether they are Markdown (a failure each)."""
    n = parse_count(args, 5, 1, 20)
    if n is None:
        return [FAILURES_USAGE], False
    failures = executions.failures(user_id, n)
    if not failures:
        return ["No failed code runs. 🎉"], False
    replies = []
    for f in failures:
        head = f"❌ `{f.id[:8]}` · {f.error_category or 'unknown'} · {f.created_at:%Y-%m-%d %H:%M} UTC"
        body = [head, _block(_clip(f.code, 500), f.language), "Error:", _block(_clip(f.stderr.strip(), 300))]
        replies.append("\n".join(body))
    return replies, True
