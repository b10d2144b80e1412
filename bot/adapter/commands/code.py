"""/codestats and /codefailures: the user's own code runs, from the execution log."""

from __future__ import annotations

from datetime import timedelta

from telegram import Update

from bot.adapter.chart_replies import ChartReplies
from bot.adapter.context import Ctx
from bot.adapter.streaming import StreamingReply
from bot.adapter.topics import place_of
from bot.config.args import parse_int
from core_tools.code.patterns import example
from core_tools.usage.caps import window
from core_tools.usage.series import day_buckets
from core_tools.usage.service import UsageService
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
    days = parse_count(args, 7, 1, 365)
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


def codestats_chart(usage: UsageService, user_id: int, days: int) -> bytes | None:
    """/codestats' chart (PNG): runs per local day of the last `days` days, None when there were none;
    blocking: run in a thread."""
    if usage.series is None:
        return None
    tz = usage.timezone(user_id)
    today = window("today", usage.clock(), tz)
    buckets = day_buckets(today.start.astimezone(tz).date() - timedelta(days=days - 1), days, tz)
    runs = usage.series.code_runs(user_id, buckets.starts[0], today.end)
    if not runs:
        return None
    from bot.adapter import charts  # the plotting module loads with the first chart, never with a plain turn

    period = "today" if days == 1 else f"the last {days} days"
    return charts.code_runs_png(buckets, runs, f"Code runs {period} ({tz.key})")


class CodeCommands:
    """Handlers for the execution-log commands; with `usage` (time zones, the chart rows) /codestats
    answers with a chart too."""

    def __init__(self, executions: Executions, usage: UsageService | None = None) -> None:
        self.executions = executions
        self.usage = usage
        self.charts = ChartReplies()

    async def codestats(self, update: Update, context: Ctx) -> None:
        """/codestats [days]."""
        assert update.effective_message and update.effective_user
        user_id, args = update.effective_user.id, context.args or []
        reply = codestats_reply(self.executions, user_id, args)
        days = parse_count(args, 7, 1, 365)
        usage = self.usage
        if days is None or usage is None:
            await update.effective_message.reply_text(reply)
            return
        await self.charts.reply(
            update.effective_message,
            reply,
            lambda: codestats_chart(usage, user_id, days),
            "Code runs per day",
        )

    async def codefailures(self, update: Update, context: Ctx) -> None:
        """/codefailures [n]."""
        assert update.effective_message and update.effective_user and update.effective_chat
        replies, markdown = codefailures_replies(
            self.executions, update.effective_user.id, context.args or []
        )
        for reply in replies:
            if markdown:
                place = place_of(update)  # in a forum topic: that topic
                await StreamingReply(context.bot, place.chat_id, thread_id=place.thread_id).finish(reply)
            else:
                await update.effective_message.reply_text(reply)
