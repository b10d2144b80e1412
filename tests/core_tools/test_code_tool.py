"""The code tool with the real sandbox, a real migrated database and the fake LLM."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime

import pytest
from sqlalchemy.orm import Session, sessionmaker

from core_tools.code.slots import CodeLimits
from core_tools.code.tool import CodeTool
from core_tools.errors import ToolError
from core_tools.llm import LLMClient
from core_tools.sandbox import LocalExecutor, SandboxLimits
from core_tools.types import ToolContext
from db.executions import Executions
from tests.support.fakes.openai_api import FakeLLM, text

CTX = ToolContext(user_id=7, chat_id=7, session_id="s1", trigger_message="please compute")


@pytest.fixture
def executions(db_sessions: sessionmaker[Session]) -> Executions:
    return Executions(db_sessions)


async def test_generate_feeds_the_error_back_and_retries(
    executions: Executions, llm: FakeLLM, llm_client: LLMClient
) -> None:
    llm.script(text("```python\nprint(undefined_name)\n```"), text("```python\nprint(sum(range(10)))\n```"))
    tool = CodeTool(LocalExecutor(SandboxLimits(timeout_s=10)), executions, llm_client)
    out = await tool.code(CTX, "generate", task="sum of 0..9")
    assert out["success"] and out["stdout"] == "45\n" and out["code"] == "print(sum(range(10)))"
    assert [a["error_category"] for a in out["attempts"]] == ["reference", None]
    retry_prompt = llm.requests[1]["messages"][-1]["content"]
    assert "NameError" in retry_prompt and "reference" in retry_prompt
    assert executions.count(7) == 2


async def test_output_to_the_model_is_bounded_and_the_log_keeps_it_all(executions: Executions) -> None:
    tool = CodeTool(LocalExecutor(SandboxLimits(timeout_s=10)), executions, output_chars=1000)
    out = await tool.code(CTX, "execute", code="print('x' * 20000)")
    assert len(out["stdout"]) < 1200 and "characters cut" in out["stdout"]
    assert executions.failures(7, 5) == []
    stats = executions.stats(7, since=datetime(2000, 1, 1, tzinfo=UTC))
    assert stats.total == 1 and stats.succeeded == 1


async def test_refusal_without_bwrap_is_logged_and_explained(executions: Executions) -> None:
    tool = CodeTool(LocalExecutor(SandboxLimits(), bwrap_path="/nonexistent/bwrap"), executions)
    out = await tool.code(CTX, "execute", code="print(1)")
    assert out["success"] is False and out["error_category"] == "refused"
    assert "bubblewrap" in out["stderr"] and "CODE_ALLOW_UNSANDBOXED" in out["stderr"]
    (failure,) = executions.failures(7, 5)
    assert failure.error_category == "refused"


async def test_bad_input_gets_clear_errors(executions: Executions) -> None:
    tool = CodeTool(LocalExecutor(SandboxLimits()), executions)
    with pytest.raises(ToolError, match="needs `code`"):
        await tool.code(CTX, "execute", code="  ")
    with pytest.raises(ToolError, match="available: python"):
        await tool.code(CTX, "execute", code="puts 1", language="ruby")
    with pytest.raises(ToolError, match="no job"):
        await tool.code(CTX, "status", job_id="nope")
    with pytest.raises(ToolError, match="needs `task`"):
        await tool.code(CTX, "generate")
    assert json.dumps(tool.jobs) == "{}"


async def test_finished_jobs_stay_readable_for_a_while_then_are_dropped(
    executions: Executions, llm: FakeLLM, llm_client: LLMClient
) -> None:
    now = [0.0]
    limits = CodeLimits(max_generations_per_user=5, keep_finished_s=600, max_finished=2)
    tool = CodeTool(
        LocalExecutor(SandboxLimits(timeout_s=10)),
        executions,
        llm_client,
        generate_wait_s=0,  # every generation continues as a background job
        limits=limits,
        clock=lambda: now[0],
    )
    llm.default = text("```python\nprint('done')\n```", delay=0.2)
    started = [await tool.code(CTX, "generate", task=f"task {i}") for i in range(3)]
    ids = [s["job_id"] for s in started]
    assert all(s["status"] == "running" for s in started) and len(tool.jobs) == 3
    for _ in range(400):  # until every job has finished (bounded)
        if tool.generations.in_use() == 0 and all(j.finished_at is not None for j in tool.jobs.values()):
            break
        await asyncio.sleep(0.05)
    # At most two finished jobs are kept: the oldest one is gone, the others answer `status`.
    assert len(tool.jobs) == 2
    kept = [i for i in ids if i in tool.jobs]
    for job_id in kept:
        out = await tool.code(CTX, "status", job_id=job_id)
        assert out["status"] == "done" and out["result"]["stdout"] == "done\n"
    now[0] += 601  # ten minutes later: dropped
    with pytest.raises(ToolError, match="a finished job is kept for 10 minutes"):
        await tool.code(CTX, "status", job_id=kept[0])
    assert tool.jobs == {}


@pytest.mark.slow
async def test_a_run_waits_for_a_slot_and_gets_a_clear_error_past_the_wait(executions: Executions) -> None:
    limits = CodeLimits(max_runs=2, max_runs_per_user=1, queue_wait_s=0.5)
    tool = CodeTool(LocalExecutor(SandboxLimits(timeout_s=10)), executions, limits=limits)
    other = ToolContext(user_id=8, chat_id=8, session_id="s2")
    slow = asyncio.create_task(tool.code(CTX, "execute", code="import time; time.sleep(3)"))
    while tool.runs.in_use(7) == 0:  # the slow run holds user 7's slot
        await asyncio.sleep(0.01)
    assert (await tool.code(other, "execute", code="print(1)"))["success"]  # another user runs at once
    with pytest.raises(ToolError, match=r"you already have 1 running \(at most 1 per user\).* within 0\.5 s"):
        await tool.code(CTX, "execute", code="print(2)")
    assert (await slow)["success"]
    assert (await tool.code(CTX, "execute", code="print(3)"))["stdout"] == "3\n"  # the slot is free again
    assert tool.runs.in_use() == 0 and executions.count(7) == 2
