"""The `code` tool: run code in the sandbox, or have a focused LLM call write it, run it and fix it."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import re
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from typing import Annotated, Any, Literal

from pydantic import Field

from core_tools.capabilities import declares
from core_tools.code.lessons import LessonsBook
from core_tools.code.patterns import failures_for_model
from core_tools.errors import BudgetExceeded, LLMUnavailable, ToolError
from core_tools.llm import LLMClient
from core_tools.sandbox import ExecutionResult, Executor
from core_tools.sandbox.model import FileLimits
from core_tools.sandbox.toolkit import Toolkit
from core_tools.tools.results import result_files
from core_tools.types import ChatMessage, FileSink, Notifier, ToolContext
from db.executions import Executions
from db.jobs import JobRow, Jobs
from db.models import CodeExecution
from db.results import ToolResults

log = logging.getLogger(__name__)

_FENCE = re.compile(r"```[\w+-]*\n(.*?)```", re.S)
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")  # terminal colours and cursor moves in a line of output

PROGRESS_AFTER_S = 3.0  # a run that lasts longer shows its elapsed time (and last output) in the status
PROGRESS_EVERY_S = 1.0  # how often that status is renewed (the chat's edit throttle still applies)
PROGRESS_LINE_CHARS = 80  # the most of a line of output the status shows
RUNNING = "running code..."
SESSION_FAILURES = 10  # the most failed runs action=failures lists

GENERATE_PROMPT = """You write one complete {language} program for the task below. It runs in a sandbox with \
{network} and no third-party packages beyond the standard library{toolkit}, reads nothing from stdin, and \
prints its result to stdout. The user's files are readable under in/; files it writes under out/ (charts as \
PNG, tables as CSV...) are sent to the user. Answer with the program only, in one fenced code block."""
TOOLKIT_NOTE = " and numpy, pandas and matplotlib (Python; no display, save figures to out/)"


def bounded(text: str, limit: int) -> str:
    """Head and tail of `text` within `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    head, tail = int(limit * 0.6), int(limit * 0.4)
    cut = len(text) - head - tail
    note = f"[... {cut} characters cut: read the whole output with read_result(handle=<execution_id>) ...]"
    return f"{text[:head]}\n{note}\n{text[-tail:]}"


def extract_code(reply: str) -> str:
    """The code from a model reply: the first fenced block, or the whole reply when there is none."""
    m = _FENCE.search(reply)
    return (m.group(1) if m else reply).strip()


def elapsed_text(seconds: float) -> str:
    """`7 s`, `2 min 05 s`: how long something has been running."""
    whole = int(seconds)
    return f"{whole} s" if whole < 60 else f"{whole // 60} min {whole % 60:02d} s"


def output_line(raw: str, limit: int = PROGRESS_LINE_CHARS) -> str:
    """A line of a run's output fit for a status line: printable characters only, one line, bounded."""
    text = _ANSI.sub("", raw)
    # isprintable() is False for control, format (bidi overrides, zero-width) and separator characters.
    text = " ".join("".join(ch if ch.isprintable() else " " for ch in text).split())
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def progress_status(label: str, seconds: float, last_line: str | None) -> str:
    """The status of a long run: what runs, for how long, and the last line it printed (if any).

    The time moves in steps that grow (1 s, then 5 s after 10 s, 15 s after a minute): a quiet run's status
    changes, and so is edited, less often the longer it runs (groups allow a bot about 20 messages a minute).
    """
    whole = int(seconds)
    step = 1 if whole < 10 else 5 if whole < 60 else 15
    line = output_line(last_line) if last_line else ""
    status = f"{label} {elapsed_text(whole - whole % step)}"
    return f"{status}, last output: {line}" if line else status


@dataclass
class _LastLine:
    """The latest complete line a run printed, as its executor reports it while it goes on."""

    line: str | None = None

    def see(self, line: str) -> None:
        """Called by the executor for each new latest line."""
        self.line = line


async def _showing_progress(
    ctx: ToolContext, label: str, run: Coroutine[Any, Any, ExecutionResult], output: _LastLine
) -> ExecutionResult:
    """Await a run; past PROGRESS_AFTER_S renew the turn's status every PROGRESS_EVERY_S with the elapsed
    time and the last line of output. A cancelled caller (a stopped turn) cancels the run."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    task = asyncio.ensure_future(run)
    shown = label
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=PROGRESS_EVERY_S)
            if done:
                return task.result()
            seconds = loop.time() - started
            status = progress_status(label, seconds, output.line)
            if seconds < PROGRESS_AFTER_S or status == shown:
                continue
            shown = status
            try:
                await ctx.progress(status)
            except Exception:  # progress is a courtesy: it must never fail the run
                log.debug("progress callback failed", exc_info=True)
    finally:
        if not task.done():
            task.cancel()
            await asyncio.wait({task})


@dataclass
class Job:
    """A background generation."""

    id: str
    user_id: int
    chat_id: int
    task: str
    status: str = "running"  # running | done | failed | cancelled
    result: dict[str, Any] | None = None
    handle: asyncio.Task[dict[str, Any]] | None = field(default=None, repr=False)
    finished_at: float | None = None  # the tool's clock; finished jobs are dropped after a while
    turn_id: int | None = None  # the turn that started it: stopping that turn cancels the job


@dataclass(frozen=True)
class CodeLimits:
    """How much code work may run at once: the host's bound, whichever executor runs the code."""

    max_runs: int = 2  # sandbox runs at once, all users
    max_runs_per_user: int = 1
    queue_wait_s: float = 60.0  # a run waits this long for a free slot, then the model gets an error
    max_generations: int = 4  # generate calls in flight (foreground or background jobs), all users
    max_generations_per_user: int = 2
    keep_finished_s: float = 3600.0  # a finished job's result stays readable by `status` this long
    max_finished: int = 50  # and at most this many finished jobs are kept (oldest dropped first)


class Slots:
    """Counts work in flight, globally and per user, against two bounds; waiters queue (event loop only)."""

    def __init__(self, total: int, per_user: int) -> None:
        self.total = total
        self.per_user = per_user
        self.busy: dict[int, int] = {}
        self.peak = 0  # the most slots ever taken at once (shown by the bench)
        self._waiters: list[asyncio.Future[None]] = []

    def in_use(self, user_id: int | None = None) -> int:
        """Slots taken by one user, or by everyone."""
        return sum(self.busy.values()) if user_id is None else self.busy.get(user_id, 0)

    def refusal(self, user_id: int) -> str | None:
        """Why `user_id` cannot take a slot now, or None when one is free."""
        if self.in_use(user_id) >= self.per_user:
            return f"you already have {self.in_use(user_id)} running (at most {self.per_user} per user)"
        if self.in_use() >= self.total:
            return f"the bot is running {self.in_use()} for all users (its limit)"
        return None

    def take(self, user_id: int) -> None:
        """Take a slot now; the caller checked `refusal` first (no await in between)."""
        self.busy[user_id] = self.busy.get(user_id, 0) + 1
        self.peak = max(self.peak, self.in_use())

    def give_back(self, user_id: int) -> None:
        """Return a slot and wake the waiters (each checks again whether it may go)."""
        left = self.busy.get(user_id, 0) - 1
        if left > 0:
            self.busy[user_id] = left
        else:
            self.busy.pop(user_id, None)
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    async def wait(self, user_id: int, timeout_s: float) -> str | None:
        """Take a slot, waiting up to `timeout_s` for one; the reason for a refusal when none came free."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while (why := self.refusal(user_id)) is not None:
            left = deadline - loop.time()
            if left <= 0:
                return why
            fut: asyncio.Future[None] = loop.create_future()
            self._waiters.append(fut)
            try:
                await asyncio.wait_for(fut, left)
            except TimeoutError:
                continue  # the loop checks once more, then gives up
            finally:
                if fut in self._waiters:
                    self._waiters.remove(fut)
        self.take(user_id)
        return None


class CodeTool:
    """Runs code through an `Executor`, logs every run, and generates code with bounded retries."""

    def __init__(
        self,
        executor: Executor,
        executions: Executions,
        llm: LLMClient | None = None,
        notifier: Notifier | None = None,
        *,
        generate_attempts: int = 3,
        generate_wait_s: float = 20.0,
        output_chars: int = 4000,
        limits: CodeLimits | None = None,
        clock: Callable[[], float] = time.monotonic,
        jobs_db: Jobs | None = None,
        files_in: Callable[[str], Mapping[str, bytes]] | None = None,
        file_sink: FileSink | None = None,
        file_limits: FileLimits | None = None,
        python_toolkit: Toolkit | None = None,
        runner: str | None = None,
        alive: Callable[[str], bool] | None = None,
        stored_results: ToolResults | None = None,
        lessons: LessonsBook | None = None,
    ) -> None:
        self.executor = executor
        self.executions = executions
        self.llm = llm
        self.notifier = notifier
        self.generate_attempts = generate_attempts
        self.generate_wait_s = generate_wait_s
        self.output_chars = output_chars
        self.limits = limits or CodeLimits()
        self.clock = clock
        # The user's files of the session (in/), and where files written under out/ go (the chat).
        self.files_in = files_in
        self.file_sink = file_sink
        self.file_limits = file_limits or FileLimits()
        # Stored results (read_result's) a run may read as in/result-<handle>.txt, the caller's own only.
        self.stored_results = stored_results
        # The per-user lessons note (core_tools/code/lessons.py): refreshed here after each run.
        self.lessons = lessons
        # The sandbox's data toolkit (numpy, pandas, matplotlib); without it, what the executor says (a
        # service executor is assumed to have it: its image does).
        self.python_toolkit = python_toolkit
        self.jobs: dict[str, Job] = {}
        # Background jobs as rows (their state survives a restart), and who runs them: the replica's id
        # where several processes share the database (bot/runtime/replica.py), else "host:pid".
        self.jobs_db = jobs_db
        self.runner = runner or f"{socket.gethostname()}:{os.getpid()}"
        # Whether the process that runs a job (by `runner`) is alive: the replicas' heartbeats where given,
        # else the host:pid test below.
        self.alive = alive
        self._closing = False
        # Parallel tool calls of one reply run concurrently: these bound what they can start at once.
        self.runs = Slots(self.limits.max_runs, self.limits.max_runs_per_user)
        self.generations = Slots(self.limits.max_generations, self.limits.max_generations_per_user)

    # The user's files go in, the program runs in the sandbox and may send files back.
    @declares(reads=["files"], writes=["execution", "files"])
    async def code(
        self,
        ctx: ToolContext,
        action: Annotated[
            Literal["execute", "generate", "status", "failures"],
            Field(
                description="execute: run `code`; generate: write and run code for `task`; status: a job; "
                "failures: this session's failed runs"
            ),
        ],
        code: Annotated[str | None, Field(description="execute: the program, read from stdin")] = None,
        language: Annotated[str, Field(description="python (default) or javascript")] = "python",
        timeout_ms: Annotated[
            int | None, Field(description="execute: wall-clock limit (the default and maximum are above)")
        ] = None,
        task: Annotated[str | None, Field(description="generate: what the code must do")] = None,
        context: Annotated[str | None, Field(description="generate: data and requirements it needs")] = None,
        job_id: Annotated[str | None, Field(description="status: the id a generate call returned")] = None,
        results: Annotated[
            list[str] | None,
            Field(description="handles (r-...) or execution_ids to read as in/result-<handle>.txt"),
        ] = None,
    ) -> dict[str, Any]:
        """Write, run or check code in a sandbox without access to the bot's files.

        Use it for calculations, data processing and anything that should be computed rather than guessed.
        The program prints its result to stdout. The user's files are in in/; files written to out/ are sent
        to the user. Long output is shown cut in the middle; read it
        whole with read_result and the run's execution_id. A slow generate continues as a background job:
        check it with action=status and its job_id.
        """
        if action == "execute":
            if not code or not code.strip():
                raise ToolError("execute needs `code`: the program to run")
            timeout_s = None if timeout_ms is None else max(timeout_ms, 1) / 1000
            await ctx.progress(RUNNING)
            extra = self.result_files(ctx, results or [])
            result, run_id = await self.execute(ctx, code, language, timeout_s, extra_files=extra)
            return self.for_model(result, run_id)
        if action == "generate":
            if not task or not task.strip():
                raise ToolError("generate needs `task`: what the code must do")
            extra = self.result_files(ctx, results or [])
            return await self.generate(ctx, task, context or "", language, extra)
        if action == "failures":
            return await asyncio.to_thread(self.session_failures, ctx)
        if not job_id:
            raise ToolError("status needs `job_id`")
        self.prune()
        job = self.jobs.get(job_id)
        if job is not None and job.user_id == ctx.user_id:
            return {"job_id": job.id, "status": job.status, "result": job.result}
        if self.jobs_db is None:
            minutes = round(self.limits.keep_finished_s / 60)
            raise ToolError(
                f"no job {job_id!r} (a finished job is kept for {minutes} minutes, and not across restarts)"
            )
        row = self.jobs_db.get(job_id, ctx.user_id)
        if row is None:
            raise ToolError(f"no job {job_id!r} of yours")
        out: dict[str, Any] = {"job_id": row.id, "status": row.status, "result": row.result}
        if row.status == "interrupted":
            out["note"] = "The bot restarted while this job ran; run generate again if it is still needed."
        return out

    @property
    def toolkit(self) -> bool:
        """Whether Python runs have the data toolkit (or will once its install, which they wait for, ends)."""
        if self.python_toolkit is not None:
            return self.python_toolkit.usable
        return bool(getattr(self.executor, "toolkit", True))

    def description(self) -> str:
        """The `code` tool's description: its docstring and what Python has installed right now."""
        if self.python_toolkit is not None:
            python = self.python_toolkit.model_note()
        elif self.toolkit:
            python = "Python has numpy, pandas and matplotlib (no display: save figures to out/)."
        else:
            python = "Python has only its standard library: no third-party packages are installed."
        return f"{inspect.getdoc(CodeTool.code)}\n\n{self.limits_note()} {python}"

    def limits_note(self) -> str:
        """The sentence of the description about what each run gets: the executor's limits (a sandbox
        service's own, whatever this bot's settings say)."""
        limits = self.executor.limits
        if limits is None:
            return "Each run gets the limits of the code sandbox service (not reachable right now)."
        network = "with network access" if limits.network else "without network"
        return (
            f"Each run: {limits.timeout_s:g} s of wall clock unless timeout_ms says otherwise (at most "
            f"{limits.max_timeout_s:g} s), {limits.memory_mb} MB of memory for all its processes, {network}."
        )

    def tool(self) -> Callable[..., Awaitable[dict[str, Any]]]:
        """The `code` tool to register: `code` described by `description()` (register it again after the
        toolkit's state changes)."""

        @functools.wraps(self.code)
        async def code(*args: Any, **kwargs: Any) -> dict[str, Any]:
            return await self.code(*args, **kwargs)

        code.__doc__ = self.description()
        return code

    def prune(self) -> int:
        """Drop finished jobs older than `keep_finished_s`, then the oldest beyond `max_finished`."""
        now = self.clock()
        finished = sorted((j.finished_at, j.id) for j in self.jobs.values() if j.finished_at is not None)
        expired = [job_id for at, job_id in finished if now - at >= self.limits.keep_finished_s]
        kept = [job_id for at, job_id in finished if now - at < self.limits.keep_finished_s]
        expired += kept[: max(0, len(kept) - self.limits.max_finished)]
        for job_id in expired:
            del self.jobs[job_id]
        return len(expired)

    def session_failures(self, ctx: ToolContext) -> dict[str, Any]:
        """The caller's failed runs of this session, newest first: code, error and category (blocking)."""
        return failures_for_model(
            self.executions.session_failures(ctx.user_id, ctx.session_id, SESSION_FAILURES)
        )

    def _refresh_lessons(self, user_id: int, failed_run: str | None) -> None:
        """After a run: rebuild the user's lessons note if their latest failure changed (blocking)."""
        if self.lessons is None:
            return
        try:
            self.lessons.refresh(user_id, failed_run)
        except Exception:  # a hint for later turns: it must never fail the run
            log.exception("could not refresh the lessons of user %s", user_id)

    def result_files(self, ctx: ToolContext, handles: list[str]) -> dict[str, bytes]:
        """The caller's stored results named by `handles`, as in/result-<handle>.txt (ToolError otherwise)."""
        if not handles:
            return {}
        if self.stored_results is None:
            raise ToolError("stored results cannot be given to code runs here")
        return result_files(self.stored_results, ctx, handles, self.file_limits)

    @asynccontextmanager
    async def _run_slot(self, user_id: int) -> AsyncIterator[None]:
        why = await self.runs.wait(user_id, self.limits.queue_wait_s)
        if why is not None:
            raise ToolError(
                f"code is not run now: {why}, and no slot came free within {self.limits.queue_wait_s:g} s. "
                "Run fewer programs at once (combine them into one), or try again shortly."
            )
        try:
            yield
        finally:
            self.runs.give_back(user_id)

    async def execute(
        self,
        ctx: ToolContext,
        code: str,
        language: str,
        timeout_s: float | None,
        label: str = RUNNING,
        extra_files: Mapping[str, bytes] | None = None,
    ) -> tuple[ExecutionResult, str]:
        """Run once (in a run slot) and log the run; ToolError for no free slot, a bad language or timeout.

        A run that lasts shows `label`, its elapsed time and its last line of output as the turn's status;
        `extra_files` join the session's files under in/ (stored results)."""
        files = dict(self.files_in(ctx.session_id)) if self.files_in is not None else {}
        files.update(extra_files or {})
        if self.python_toolkit is not None and language.strip().lower() in ("python", "py", "python3"):
            await self.python_toolkit.wait_for_install(ctx.progress, self.limits.queue_wait_s)
        async with self._run_slot(ctx.user_id):
            output = _LastLine()
            run = self.executor.run(
                code,
                language,
                timeout_s,
                files_in=files or None,
                files_out=self.file_limits if self.file_sink is not None else None,
                on_output=output.see,
            )
            result = await _showing_progress(ctx, label, run, output)
        if self.file_sink is not None and (result.files_out or result.files_skipped):
            # The chat gets what fits, and a note naming what did not (over a limit, or refused by it).
            failed = await self.file_sink.send_files(
                ctx.chat_id, list(result.files_out), list(result.files_skipped)
            )
            if failed:
                sent = tuple(
                    f for f in result.files_out if not any(x.startswith(f"{f.name}: ") for x in failed)
                )
                result = replace(result, files_out=sent, files_skipped=result.files_skipped + tuple(failed))
        row = CodeExecution(
            id=str(uuid.uuid4()),
            code=code,
            stdout=result.stdout,
            stderr=result.stderr,
            exit_code=result.exit_code,
            duration_ms=result.duration_ms,
            success=result.success,
            session_id=ctx.session_id,
            trigger_message=ctx.trigger_message,
            llm_reasoning=ctx.reasoning,
            error_category=result.error_category,
            language=result.language,
            user_id=ctx.user_id,
            isolation=result.isolation,
            stdout_bytes=result.stdout_bytes,
            stderr_bytes=result.stderr_bytes,
            truncated=result.truncated,
            files_out=[{"name": f.name, "size": len(f.data)} for f in result.files_out] or None,
        )
        run_id = self.executions.record(row)
        if self.lessons is not None:
            # A failure of this run is the user's latest; after a success one query tells whether another
            # process logged a newer failure. Either way a plain turn reads the note from memory.
            await asyncio.to_thread(self._refresh_lessons, ctx.user_id, None if result.success else run_id)
        return result, run_id

    def for_model(self, result: ExecutionResult, run_id: str) -> dict[str, Any]:
        """What the model sees of a run: bounded output, the category, the isolation level."""
        out: dict[str, Any] = {
            "success": result.success,
            "exit_code": result.exit_code,
            "stdout": bounded(result.stdout, self.output_chars),
            "stderr": bounded(result.stderr, self.output_chars // 2),
            "duration_ms": result.duration_ms,
            "isolation": result.isolation,
            "execution_id": run_id,
        }
        if result.error_category:
            out["error_category"] = result.error_category
        if result.files_out:
            out["files_sent_to_chat"] = [{"name": f.name, "bytes": len(f.data)} for f in result.files_out]
        if result.files_in_skipped:
            out["files_not_in"] = list(result.files_in_skipped)
        if result.files_skipped:
            out["files_not_sent"] = list(result.files_skipped)
            if self.file_sink is not None:
                out["files_not_sent_note"] = "the user was shown this list"
        note = self.python_toolkit.run_note() if self.python_toolkit and result.language == "python" else None
        if note and not result.success:
            out["note"] = note
        if result.truncated:
            out["truncated"] = (
                f"output was cut at the sandbox cap: {result.stdout_bytes} bytes of stdout and "
                f"{result.stderr_bytes} bytes of stderr were produced"
            )
        return out

    async def generate(
        self,
        ctx: ToolContext,
        task: str,
        context: str,
        language: str,
        extra_files: Mapping[str, bytes] | None = None,
    ) -> dict[str, Any]:
        """Generate and run; past `generate_wait_s` the work continues as a background job."""
        if self.llm is None:
            raise ToolError("code generation is not configured")
        if language not in self.executor.languages():
            raise ToolError(
                f"language {language!r} is not available; available: {', '.join(self.executor.languages())}"
            )
        await ctx.progress("writing code...")
        why = self.generations.refusal(ctx.user_id)
        if why is not None:
            raise ToolError(
                f"no new code generation started: {why}. Wait for the running ones (action=status with "
                "their job_id), or write the code yourself and use action=execute."
            )
        # Checked and taken with no await in between: parallel calls of one reply cannot all pass.
        self.generations.take(ctx.user_id)
        self.prune()
        handle = asyncio.create_task(self._generate(ctx, task, context, language, extra_files))
        # The slot is held until the generation ends, foreground or background.
        handle.add_done_callback(lambda _: self.generations.give_back(ctx.user_id))
        try:
            done, _ = await asyncio.wait({handle}, timeout=self.generate_wait_s)
        except asyncio.CancelledError:  # the turn was stopped: its generation (and sandbox run) stops too
            handle.cancel()
            await asyncio.wait({handle})
            raise
        if done:
            return handle.result()
        job = Job(uuid.uuid4().hex[:12], ctx.user_id, ctx.chat_id, task, handle=handle, turn_id=ctx.turn_id)
        self.jobs[job.id] = job
        if self.jobs_db is not None:
            self.jobs_db.started(
                job.id,
                user_id=ctx.user_id,
                chat_id=ctx.chat_id,
                session_id=ctx.session_id,
                task=task,
                language=language,
                runner=self.runner,
            )
        handle.add_done_callback(lambda t: asyncio.create_task(self._finish_job(job, t)))
        return {
            "job_id": job.id,
            "status": "running",
            "note": "Generation continues in the background; the result will be sent to the chat when it is "
            "done. Tell the user so; use action=status with this job_id to check.",
        }

    async def cancel_turn(self, turn_id: int) -> int:
        """Cancel the background jobs a turn started (the user stopped it); returns how many; waits for
        them (and their sandbox runs) to end."""
        jobs = [j for j in self.jobs.values() if j.turn_id == turn_id and j.handle is not None]
        handles = [j.handle for j in jobs if j.handle is not None]
        for handle in handles:
            handle.cancel()
        if handles:
            await asyncio.wait(handles)
        for job in jobs:
            job.status, job.result = "cancelled", {"error": "cancelled: the user stopped the turn"}
        return len(jobs)

    async def _finish_job(self, job: Job, task: asyncio.Task[dict[str, Any]]) -> None:
        if task.cancelled() and self._closing:
            return  # a shutdown, not a result: the next start reports the job as interrupted
        if task.cancelled():  # stopped by the user, who already saw the turn end: recorded, no message
            job.status, job.result = "cancelled", {"error": "cancelled: the user stopped the turn"}
            job.finished_at = self.clock()
            job.handle = None
            self.prune()
            self._record_end(job)
            return
        elif task.exception() is not None:
            job.status, job.result = "failed", {"error": str(task.exception())}
        else:
            job.result = task.result()
            job.status = "done" if job.result.get("success") else "failed"
        job.finished_at = self.clock()
        job.handle = None
        self.prune()
        self._record_end(job)
        if self.notifier is None:
            return
        res = job.result or {}
        lines = [f"Background code job `{job.id}` ({job.task[:80]}) finished: {job.status}."]
        if res.get("code"):
            lines.append(f"```{res.get('language', '')}\n{res['code'][:1500]}\n```")
        if res.get("stdout"):
            lines.append(f"Output:\n```\n{str(res['stdout'])[:1500]}\n```")
        if res.get("error") or (res.get("stderr") and not res.get("success")):
            lines.append(f"Error:\n```\n{str(res.get('error') or res.get('stderr'))[:800]}\n```")
        try:
            await self.notifier.send(job.chat_id, "\n\n".join(lines))
        except Exception:
            log.exception("could not deliver background job %s", job.id)

    def _record_end(self, job: Job) -> None:
        """Write a job's end to its row, so `status` answers after a restart too."""
        if self.jobs_db is None:
            return
        try:
            self.jobs_db.finished(job.id, job.status, job.result)
        except Exception:
            log.exception("could not record the end of job %s", job.id)

    async def aclose(self) -> None:
        """Stop the running background jobs without recording an end (the next start reports them), then
        the executor's sandboxes started ahead."""
        self._closing = True
        handles = [j.handle for j in self.jobs.values() if j.handle is not None]
        for handle in handles:
            handle.cancel()
        await asyncio.gather(*handles, return_exceptions=True)
        close: Callable[[], Awaitable[None]] | None = getattr(self.executor, "aclose", None)
        if close is not None:
            await close()

    def _stale(self, runner: str) -> bool:
        """Whether the process that ran a job is gone: this very process at its start (a container's pid
        repeats), a pid no longer alive here, or another host's (a container recreated)."""
        if self.alive is not None:
            return not self.alive(runner)
        host, _, pid = runner.rpartition(":")
        if host != socket.gethostname() or not pid.isdigit():
            return True
        if int(pid) == os.getpid():
            return True
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False

    async def recover(self) -> list[JobRow]:
        """At start: mark jobs whose process ended while they ran as interrupted and tell their chats."""
        if self.jobs_db is None:
            return []
        stale = [j for j in self.jobs_db.running() if self._stale(j.runner)]
        self.jobs_db.interrupt([j.id for j in stale], "interrupted: the bot restarted while this job ran")
        for job in stale:
            log.warning("background code job %s was interrupted by a restart", job.id)
            if self.notifier is None:
                continue
            try:
                await self.notifier.send(
                    job.chat_id,
                    f"Background code job `{job.id}` ({job.task[:80]}) was interrupted: I was restarted "
                    "while it ran. Ask me again if you still need it.",
                )
            except Exception:
                log.exception("could not report interrupted job %s", job.id)
        return stale

    async def _generate(
        self,
        ctx: ToolContext,
        task: str,
        context: str,
        language: str,
        extra_files: Mapping[str, bytes] | None = None,
    ) -> dict[str, Any]:
        assert self.llm is not None
        limits = self.executor.limits
        messages = [
            ChatMessage(
                "system",
                GENERATE_PROMPT.format(
                    language=language,
                    network="network access" if limits is not None and limits.network else "no network",
                    toolkit=TOOLKIT_NOTE if language == "python" and self.toolkit else "",
                ),
            ),
            ChatMessage(
                "user",
                f"Task: {task}"
                + (f"\n\nContext:\n{context}" if context else "")
                + (f"\n\nFiles: {', '.join(f'in/{n}' for n in extra_files)}" if extra_files else ""),
            ),
        ]
        attempts: list[dict[str, Any]] = []
        last: dict[str, Any] = {}
        for n in range(1, self.generate_attempts + 1):
            try:
                reply = await self.llm.complete(
                    messages, purpose="code_generate", user_id=ctx.user_id, session_id=ctx.session_id
                )
            except (LLMUnavailable, BudgetExceeded) as exc:
                return {"success": False, "error": f"code generation stopped: {exc}", "attempts": attempts}
            program = extract_code(reply.content)
            label = f"running generated code (attempt {n})..."
            await ctx.progress(label)
            result, run_id = await self.execute(ctx, program, language, None, label, extra_files)
            last = {"code": program, "language": language, **self.for_model(result, run_id)}
            attempts.append(
                {"attempt": n, "success": result.success, "error_category": result.error_category}
            )
            if result.success:
                break
            messages += [
                ChatMessage("assistant", reply.content),
                ChatMessage(
                    "user",
                    f"It failed ({result.error_category}). stderr:\n{bounded(result.stderr, 2000)}\n"
                    f"stdout:\n{bounded(result.stdout, 1000)}\n"
                    "Fix the program; answer with the whole program.",
                ),
            ]
        return {**last, "attempts": attempts}
