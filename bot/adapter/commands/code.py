"""/codestats and /codefailures in Telegram: the replies (bot/texts/code.py), /codestats' chart and the
failures as Markdown messages."""

from __future__ import annotations

from datetime import timedelta

from telegram import Update

from bot.adapter.chart_replies import ChartReplies
from bot.adapter.context import Ctx
from bot.adapter.streaming import StreamingReply
from bot.adapter.topics import place_of
from bot.texts.code import codefailures_replies, codestats_reply, stats_days
from core_tools.usage.caps import window
from core_tools.usage.series import day_buckets
from core_tools.usage.service import UsageService
from db.executions import Executions


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
        days = stats_days(args)
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
