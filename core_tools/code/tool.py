"""The `code` tool: run code in the sandbox (here), or have a focused LLM call write it, run it and fix it
(core_tools/code/generation.py)."""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Annotated, Any, Literal

from pydantic import Field

from core_tools.capabilities import declares
from core_tools.code.generation import CodeGeneration, Job
from core_tools.code.lessons import LessonsBook
from core_tools.code.output import LastLine, bounded, showing_progress
from core_tools.code.patterns import failures_for_model
from core_tools.code.slots import CodeLimits, Slots
from core_tools.errors import ToolError
from core_tools.llm import ChatModel
from core_tools.sandbox import ExecutionResult, Executor
from core_tools.sandbox.model import FileLimits
from core_tools.sandbox.toolkit import Toolkit
from core_tools.tools.results import result_files
from core_tools.types import FileSink, Notifier, ToolContext
from db.executions import Executions
from db.jobs import Jobs
from db.models import CodeExecution
from db.results import ToolResults

log = logging.getLogger(__name__)

RUNNING = "running code..."
SESSION_FAILURES = 10  # the most failed runs action=failures lists


class CodeTool(CodeGeneration):
    """Runs code through an `Executor`, logs every run, and generates code with bounded retries."""

    def __init__(
        self,
        executor: Executor,
        executions: Executions,
        llm: ChatModel | None = None,
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
            output = LastLine()
            run = self.executor.run(
                code,
                language,
                timeout_s,
                files_in=files or None,
                files_out=self.file_limits if self.file_sink is not None else None,
                on_output=output.see,
            )
            result = await showing_progress(ctx, label, run, output)
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
