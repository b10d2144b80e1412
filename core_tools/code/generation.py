"""Generated code: a focused LLM call writes a program, runs it and fixes it; a slow generation goes on as a
background job (its row survives a restart), which a stopped turn cancels and a restart reports interrupted.

CodeGeneration is a part of the `code` tool (core_tools/code/tool.py), which provides the runs it makes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import socket
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core_tools.code.output import bounded
from core_tools.code.slots import CodeLimits, Slots
from core_tools.errors import BudgetExceeded, LLMUnavailable, ToolError
from core_tools.llm import ChatModel
from core_tools.sandbox import ExecutionResult, Executor
from core_tools.sandbox.toolkit import Toolkit
from core_tools.types import ChatMessage, Notifier, ToolContext
from db.jobs import JobRow, Jobs

log = logging.getLogger(__name__)

_FENCE = re.compile(r"```[\w+-]*\n(.*?)```", re.S)

GENERATE_PROMPT = """You write one complete {language} program for the task below. It runs in a sandbox with \
{network} and no third-party packages beyond the standard library{toolkit}, reads nothing from stdin, and \
prints its result to stdout. The user's files are readable under in/; files it writes under out/ (charts as \
PNG, tables as CSV...) are sent to the user. Answer with the program only, in one fenced code block."""
TOOLKIT_NOTE = " and numpy, pandas and matplotlib (Python; no display, save figures to out/)"


def extract_code(reply: str) -> str:
    """The code from a model reply: the first fenced block, or the whole reply when there is none."""
    m = _FENCE.search(reply)
    return (m.group(1) if m else reply).strip()


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


class CodeGeneration:
    """The `generate` action and its background jobs: what CodeTool holds for them, and what it runs."""

    executor: Executor
    llm: ChatModel | None
    notifier: Notifier | None
    generate_attempts: int
    generate_wait_s: float
    limits: CodeLimits
    clock: Callable[[], float]
    jobs: dict[str, Job]
    jobs_db: Jobs | None
    runner: str
    alive: Callable[[str], bool] | None
    _closing: bool
    generations: Slots
    # CodeTool's: one logged run in a run slot, and what the model sees of it.
    execute: Callable[..., Awaitable[tuple[ExecutionResult, str]]]
    for_model: Callable[[ExecutionResult, str], dict[str, Any]]
    python_toolkit: Toolkit | None

    @property
    def toolkit(self) -> bool:
        """Whether Python runs have the data toolkit (or will once its install, which they wait for, ends)."""
        if self.python_toolkit is not None:
            return self.python_toolkit.usable
        return bool(getattr(self.executor, "toolkit", True))

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
