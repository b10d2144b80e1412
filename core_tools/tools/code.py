"""The `code` tool: run code in the sandbox, or have a focused LLM call write it, run it and fix it."""

from __future__ import annotations

import asyncio
import logging
import re
import uuid
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field

from core_tools.errors import BudgetExceeded, LLMUnavailable, ToolError
from core_tools.llm import LLMClient
from core_tools.sandbox import ExecutionResult, Executor
from core_tools.types import ChatMessage, Notifier, ToolContext
from db.executions import Executions
from db.models import CodeExecution

log = logging.getLogger(__name__)

_FENCE = re.compile(r"```[\w+-]*\n(.*?)```", re.S)

GENERATE_PROMPT = """You write one complete {language} program for the task below. It runs in a sandbox with \
no network and no third-party packages beyond the standard library, reads nothing from stdin, and prints its \
result to stdout. Answer with the program only, in one fenced code block."""


def bounded(text: str, limit: int) -> str:
    """Head and tail of `text` within `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    head, tail = int(limit * 0.6), int(limit * 0.4)
    cut = len(text) - head - tail
    note = f"[... {cut} characters cut; the full output is in the execution log ...]"
    return f"{text[:head]}\n{note}\n{text[-tail:]}"


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
    status: str = "running"  # running | done | failed
    result: dict[str, Any] | None = None
    handle: asyncio.Task[dict[str, Any]] | None = field(default=None, repr=False)


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
    ) -> None:
        self.executor = executor
        self.executions = executions
        self.llm = llm
        self.notifier = notifier
        self.generate_attempts = generate_attempts
        self.generate_wait_s = generate_wait_s
        self.output_chars = output_chars
        self.jobs: dict[str, Job] = {}

    async def code(
        self,
        ctx: ToolContext,
        action: Annotated[
            Literal["execute", "generate", "status"],
            Field(description="execute: run `code`; generate: write and run code for `task`; status: a job"),
        ],
        code: Annotated[str | None, Field(description="execute: the program, read from stdin")] = None,
        language: Annotated[str, Field(description="python (default) or javascript")] = "python",
        timeout_ms: Annotated[
            int | None, Field(description="execute: wall-clock limit, default 30000")
        ] = None,
        task: Annotated[str | None, Field(description="generate: what the code must do")] = None,
        context: Annotated[str | None, Field(description="generate: data and requirements it needs")] = None,
        job_id: Annotated[str | None, Field(description="status: the id a generate call returned")] = None,
    ) -> dict[str, Any]:
        """Write, run or check code in a sandbox without network or access to the bot's files.

        Use it for calculations, data processing and anything that should be computed rather than guessed.
        The program prints its result to stdout.
        """
        if action == "execute":
            if not code or not code.strip():
                raise ToolError("execute needs `code`: the program to run")
            timeout_s = None if timeout_ms is None else max(timeout_ms, 1) / 1000
            await ctx.progress("running code...")
            result, run_id = await self.execute(ctx, code, language, timeout_s)
            return self.for_model(result, run_id)
        if action == "generate":
            if not task or not task.strip():
                raise ToolError("generate needs `task`: what the code must do")
            return await self.generate(ctx, task, context or "", language)
        if not job_id:
            raise ToolError("status needs `job_id`")
        job = self.jobs.get(job_id)
        if job is None or job.user_id != ctx.user_id:
            raise ToolError(f"no job {job_id!r} (jobs are kept until the bot restarts)")
        return {"job_id": job.id, "status": job.status, "result": job.result}

    async def execute(
        self, ctx: ToolContext, code: str, language: str, timeout_s: float | None
    ) -> tuple[ExecutionResult, str]:
        """Run once and log the run; ToolError for an unavailable language or a bad timeout."""
        result = await self.executor.run(code, language, timeout_s)
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
        )
        return result, self.executions.record(row)

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
        if result.truncated:
            out["truncated"] = (
                f"output was cut at the sandbox cap: {result.stdout_bytes} bytes of stdout and "
                f"{result.stderr_bytes} bytes of stderr were produced"
            )
        return out

    async def generate(self, ctx: ToolContext, task: str, context: str, language: str) -> dict[str, Any]:
        """Generate and run; past `generate_wait_s` the work continues as a background job."""
        if self.llm is None:
            raise ToolError("code generation is not configured")
        if language not in self.executor.languages():
            raise ToolError(
                f"language {language!r} is not available; available: {', '.join(self.executor.languages())}"
            )
        await ctx.progress("writing code...")
        handle = asyncio.create_task(self._generate(ctx, task, context, language))
        done, _ = await asyncio.wait({handle}, timeout=self.generate_wait_s)
        if done:
            return handle.result()
        job = Job(uuid.uuid4().hex[:12], ctx.user_id, ctx.chat_id, task, handle=handle)
        self.jobs[job.id] = job
        handle.add_done_callback(lambda t: asyncio.create_task(self._finish_job(job, t)))
        return {
            "job_id": job.id,
            "status": "running",
            "note": "Generation continues in the background; the result will be sent to the chat when it is "
            "done. Tell the user so; use action=status with this job_id to check.",
        }

    async def _finish_job(self, job: Job, task: asyncio.Task[dict[str, Any]]) -> None:
        if task.cancelled():
            job.status, job.result = "failed", {"error": "cancelled"}
        elif task.exception() is not None:
            job.status, job.result = "failed", {"error": str(task.exception())}
        else:
            job.result = task.result()
            job.status = "done" if job.result.get("success") else "failed"
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

    async def _generate(self, ctx: ToolContext, task: str, context: str, language: str) -> dict[str, Any]:
        assert self.llm is not None
        messages = [
            ChatMessage("system", GENERATE_PROMPT.format(language=language)),
            ChatMessage("user", f"Task: {task}" + (f"\n\nContext:\n{context}" if context else "")),
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
            await ctx.progress(f"running generated code (attempt {n})...")
            result, run_id = await self.execute(ctx, program, language, None)
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
