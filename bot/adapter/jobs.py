"""The runtime's jobs (bot/runtime/jobs.py) on PTB's JobQueue (APScheduler), and the schedule runner's
wake-ups as one-off jobs of it: PTB stops them with the application.

Every job runs late rather than never: APScheduler skips a run later than its misfire grace
(docs/design-notes.md, APScheduler), so none has a grace limit; a repeating job that fell behind runs once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Coroutine
from contextlib import suppress
from typing import Any

from apscheduler.jobstores.base import JobLookupError
from telegram.ext import JobQueue

from bot.adapter.context import App, Ctx
from bot.runtime.backup_jobs import BackupJobs
from bot.runtime.jobs import Job, runtime_jobs


def new_job_queue() -> JobQueue[Ctx]:
    """The application's job queue, made before it (the schedule runner arms its wake-ups on it)."""
    return JobQueue()


class JobQueueTimer:
    """The schedule runner's timer (bot/runtime/schedule_jobs.py): a one-off job of the job queue."""

    def __init__(self, job_queue: JobQueue[Ctx], name: str = "schedule-tick") -> None:
        self.job_queue = job_queue
        self.name = name

    def call_in(self, delay: float, run: Callable[[], Awaitable[None]]) -> Callable[[], None]:
        """Run `run` in `delay` seconds, as a job with no misfire grace; what removes the job."""

        async def callback(context: Ctx) -> None:
            await run()

        job = self.job_queue.run_once(
            callback, when=delay, name=self.name, job_kwargs={"misfire_grace_time": None}
        )

        def cancel() -> None:
            with suppress(JobLookupError):  # it has just run
                job.schedule_removal()

        return cancel


def _callback(run: Callable[[], Awaitable[None]]) -> Callable[[Ctx], Coroutine[Any, Any, None]]:
    async def callback(context: Ctx) -> None:
        await run()

    return callback


def register_jobs(app: App, jobs: tuple[Job, ...] | None = None) -> None:
    """Register `jobs` (default: the runtime's, over the application's services, outbox and schedule runner)
    on the application's JobQueue, each leased one wrapped to run in one process at a time."""
    jq = app.job_queue
    if jq is None:
        raise RuntimeError("python-telegram-bot was installed without its job-queue extra")
    data = app.bot_data
    if jobs is None:
        jobs = runtime_jobs(data.services, data.schedule_runner.outbox, data.schedule_runner)
    replica = data.services.replica
    for job in jobs:
        run = job.run if job.lease is None else replica.exclusive(job.lease, job.run)
        if job.every is None:
            jq.run_once(
                _callback(run), when=job.first, name=job.name, job_kwargs={"misfire_grace_time": None}
            )
        else:
            jq.run_repeating(
                _callback(run),
                interval=job.every,
                first=job.first,
                name=job.name,
                job_kwargs={"misfire_grace_time": None, "coalesce": True},
            )


def register_backup_jobs(app: App, backups: BackupJobs) -> None:
    """The periodic backup check of `backups` when BACKUP_SCHEDULE is set (bot/runtime/backup_jobs.py)."""
    if app.job_queue is None:
        return
    register_jobs(app, backups.jobs())
