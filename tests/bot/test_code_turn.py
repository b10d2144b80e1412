"""The code tool through the whole stack, the execution log, /codestats and /codefailures."""

from __future__ import annotations

import json
from pathlib import Path

from sqlalchemy import select

from core_tools.types import ToolContext
from db.models import CodeExecution
from tests.support.fakes.openai_api import FakeLLM, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, Harness, running_bot


def runs(h: Harness) -> list[dict[str, object]]:
    with h.services.engine.connect() as conn:
        return [dict(r) for r in conn.execute(select(CodeExecution)).mappings()]


async def test_execute_turn_shows_progress_logs_the_run_and_answers(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(
        tool_calls(call("code", {"action": "execute", "code": "print(6 * 7)"}), content="Let me compute it."),
        text("The answer is 42."),
    )
    async with running_bot(tmp_path, tg, llm, stream_edit_interval_s=0) as h:
        tg.push_text(OWNER, "what is six times seven?")
        await h.final_text(OWNER, "The answer is 42.")
        assert any("running code..." in str(c.params.get("text")) for c in tg.calls)
        result = json.loads(llm.requests[1]["messages"][-1]["content"])
        assert result["success"] is True and result["stdout"] == "42\n" and result["isolation"] == "bwrap"
        (row,) = runs(h)
        assert row["code"] == "print(6 * 7)" and row["stdout"] == "42\n" and row["success"]
        assert row["user_id"] == OWNER and row["session_id"] and row["isolation"] == "bwrap"
        assert row["trigger_message"] == "what is six times seven?"
        assert row["llm_reasoning"] == "Let me compute it."


async def test_codestats_and_codefailures_show_only_the_users_runs(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        tool = h.services.code
        session = h.services.conversations.current_session(OWNER, OWNER).id
        ctx = ToolContext(user_id=OWNER, chat_id=OWNER, session_id=session)
        await tool.execute(ctx, "print('ok')", "python", None)
        await tool.execute(ctx, "print('also ok')", "python", None)
        await tool.execute(ctx, "def broken(:\n    pass", "python", None)
        await tool.execute(ToolContext(user_id=FRIEND, chat_id=FRIEND, session_id="x"), "1/0", "python", None)

        tg.push_text(OWNER, "/codestats")
        stats = await h.final_text(OWNER, "Code runs in the last 7 days")
        assert "Total: 3 · succeeded: 2 · failed: 1" in stats and "Top errors: syntax 1" in stats

        # /codestats' example shows the failing line too: wait for the answer to /codefailures itself.
        failure = await h.command(OWNER, "/codefailures", "def broken(:")
        assert "syntax" in failure and "SyntaxError" in failure
        entities = tg.last_message(OWNER)["entities"]
        assert [e["type"] for e in entities].count("pre") == 2
        assert "ZeroDivisionError" not in "\n".join(tg.sent_texts(OWNER))  # the friend's run stays private

        for bad in ("abc", "-3", "100000", "0"):
            tg.push_text(OWNER, f"/codefailures {bad}")
        await tg.wait_for(lambda: sum("Usage: /codefailures" in t for t in tg.sent_texts(OWNER)) == 4)
        tg.push_text(OWNER, "/codestats soon")
        await h.final_text(OWNER, "Usage: /codestats")
        assert llm.requests == []


async def test_background_generate_delivers_its_result_to_the_chat(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(
        tool_calls(call("code", {"action": "generate", "task": "add two and two"})),
        text("```python\nprint(2 + 2)\n```", delay=1.0),  # the focused generation call: slow
        text("I am working on it in the background."),
    )
    async with running_bot(tmp_path, tg, llm, code_generate_wait_s=0.2) as h:
        tg.push_text(OWNER, "write a program that adds two and two")
        await h.final_text(OWNER, "working on it in the background")
        first_result = json.loads(llm.requests[2]["messages"][-1]["content"])
        assert first_result["status"] == "running" and first_result["job_id"]
        delivered = await h.final_text(OWNER, "Background code job")
        assert "finished: done" in delivered and "print(2 + 2)" in delivered and "4" in delivered
        assert llm.requests[1]["messages"][0]["role"] == "system"
        assert "add two and two" in llm.requests[1]["messages"][1]["content"]
        assert "tools" not in llm.requests[1]
