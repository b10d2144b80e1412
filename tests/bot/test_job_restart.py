"""Background code jobs are rows: a restart during a job is reported to the chat, and `status` answers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sqlalchemy import select

from core_tools.types import ToolCallRequest, ToolContext
from db.models import CodeJob
from tests.support.fakes.openai_api import FakeLLM, Step, call, hang, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, running_bot


def generation_hangs(body: dict[str, Any]) -> Step:
    """The code generation's own LLM request never ends; the chat's next request answers."""
    if "You write one complete" in str(body["messages"][0].get("content")):
        return hang(120)
    return text("It runs in the background.")


def tool_result(llm: FakeLLM, key: str) -> dict[str, Any]:
    for request in reversed(llm.requests):
        for m in reversed(request["messages"]):
            if m["role"] == "tool" and key in m["content"]:
                result: dict[str, Any] = json.loads(m["content"])
                return result
    raise AssertionError(f"no tool result with {key!r}")


async def test_a_restart_during_a_background_job_is_reported_and_status_answers_after(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(
        tool_calls(call("code", {"action": "generate", "task": "count the primes below 10**9"})),
        generation_hangs,
        generation_hangs,
    )
    async with running_bot(tmp_path, tg, llm, code_generate_wait_s=0) as h:
        tg.push_text(OWNER, "count the primes below a billion")
        await h.final_text(OWNER, "It runs in the background.")
        job_id = tool_result(llm, "job_id")["job_id"]
        ctx = ToolContext(user_id=OWNER, chat_id=OWNER, session_id="x")
        before = await h.services.code.code(ctx, "status", job_id=job_id)
        assert before["status"] == "running"
        with h.services.engine.connect() as conn:
            (row,) = conn.execute(select(CodeJob.status, CodeJob.user_id, CodeJob.task)).all()
        assert row == ("running", OWNER, "count the primes below 10**9")
    # The bot stopped while the job ran; it starts again on the same database.
    llm.script(tool_calls(call("code", {"action": "status", "job_id": job_id})), text("It was interrupted."))
    async with running_bot(tmp_path, tg, llm) as h:
        notice = await h.final_text(OWNER, "was interrupted")
        assert job_id in notice and "count the primes" in notice and "Ask me again" in notice
        tg.push_text(OWNER, "how is my job?")
        await h.final_text(OWNER, "It was interrupted.")
        after = tool_result(llm, '"status"')
        assert after["job_id"] == job_id and after["status"] == "interrupted"
        assert "restarted" in after["note"]
        # Only the user's own jobs answer.
        other = ToolContext(user_id=FRIEND, chat_id=FRIEND, session_id="y")
        out = await h.services.registry.call(
            ToolCallRequest("c", "code", json.dumps({"action": "status", "job_id": job_id})),
            other,
        )
        assert not out.ok and "no job" in (out.error or "")
    # A third start reports nothing again.
    async with running_bot(tmp_path, tg, llm) as h:
        assert await h.services.code.recover() == []
    assert sum("Ask me again" in t for t in tg.sent_texts(OWNER)) == 1
