"""/stop and the Stop button: the stream closed, tools and sandbox runs killed, the partial answer kept."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from sqlalchemy import select

from db.models import Message
from tests.support.fakes.openai_api import FakeLLM, TextStep, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, Harness, running_bot

LONG = "word " * 400  # a long answer, of which only the start is ever streamed


def slow_text(content: str = LONG, hold: asyncio.Event | None = None) -> TextStep:
    """The start of a long answer, then a stream held open until `hold` is set (by default never): the turn
    is still running when the test stops it, however slow the machine (no race with its end)."""
    return text(content[:200], chunk_size=5, hold=hold or asyncio.Event())


def statuses(h: Harness, role: str) -> list[tuple[str | None, str]]:
    with h.services.engine.connect() as conn:
        rows = conn.execute(select(Message.content, Message.status).where(Message.role == role)).all()
    return [(r[0], r[1]) for r in rows]


def processes_with(marker: str) -> list[int]:
    """Host processes whose command line holds `marker` (a sandbox run's processes are visible here)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    found.append(int(pid))
        except OSError:
            continue
    return found


async def streaming_preview(tg: FakeTelegram, chat: int) -> dict[str, object]:
    """Wait for the streamed preview that carries the Stop button."""

    def preview() -> dict[str, object] | None:
        msgs = tg.messages.get(chat, [])
        return next((m for m in msgs if "reply_markup" in m and "word" in str(m.get("text"))), None)

    found: dict[str, object] = await tg.wait_for(preview, what="the streamed preview with its Stop button")
    return found


async def test_stop_mid_stream_keeps_the_partial_answer_and_frees_the_chat(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(slow_text(), text("Fresh answer."))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "write a long text")
        preview = await streaming_preview(tg, OWNER)
        markup = preview["reply_markup"]
        assert isinstance(markup, dict) and markup["inline_keyboard"][0][0]["text"] == "Stop"
        tg.push_text(OWNER, "/stop")
        stopped = await h.final_text(OWNER, "(stopped)")
        assert stopped.startswith("word word") and stopped.endswith("(stopped)") and len(stopped) < len(LONG)
        assert "reply_markup" not in tg.last_message(OWNER)  # the button is gone with the final text
        await tg.wait_for(lambda: llm.disconnects == 1, what="the LLM stream closed by the client")
        user = statuses(h, "user")
        assert user == [("write a long text", "stopped")]
        (partial,) = statuses(h, "assistant")
        assert partial[1] == "stopped" and partial[0] and partial[0].endswith("[stopped by the user]")

        # The chat is free at once, and the model sees what it had said before the stop.
        tg.push_text(OWNER, "something else")
        await h.final_text(OWNER, "Fresh answer.")
        history = llm.requests[-1]["messages"]
        assert history[1] == {"role": "user", "content": "write a long text"}
        assert history[2]["role"] == "assistant" and "[stopped by the user]" in history[2]["content"]
        assert history[3] == {"role": "user", "content": "something else"}
        usage = await h.command(OWNER, "/usage", "Usage today")
        assert "LLM calls: 2" in usage and "failed" not in usage  # a stop is not a failure


async def test_the_stop_button_stops_and_stop_with_nothing_running_says_so(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(slow_text())
    async with running_bot(tmp_path, tg, llm) as h:
        await h.command(OWNER, "/stop", "Nothing is running")
        tg.push_text(OWNER, "write a long text")
        preview = await streaming_preview(tg, OWNER)
        data = preview["reply_markup"]["inline_keyboard"][0][0]["callback_data"]  # type: ignore[index]
        tg.push_callback(OWNER, data, message_id=int(str(preview["message_id"])))
        await h.final_text(OWNER, "(stopped)")
        (answered,) = await tg.wait_for_call("answerCallbackQuery")
        assert answered.params.get("text") == "Stopped."
        # A stale button (its answer is finished) stops nothing.
        tg.push_callback(OWNER, data, message_id=int(str(preview["message_id"])))
        await tg.wait_for(
            lambda: any(c.params.get("text") == "That answer is already finished." for c in tg.calls),
            what="the stale button's answer",
        )


async def test_stop_during_a_slow_sandbox_run_kills_its_process_tree(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    marker = "317.25"  # a sleep only this run starts, with a child of its own
    code = f"import subprocess, time\nsubprocess.Popen(['sleep', '{marker}'])\ntime.sleep({marker})\n"
    llm.script(
        tool_calls(call("code", {"action": "execute", "code": code}), content="Running it."), text("Next.")
    )
    async with running_bot(tmp_path, tg, llm, code_timeout_s=600, code_max_timeout_s=600) as h:
        tg.push_text(OWNER, "run something slow")
        await tg.wait_for(lambda: len(processes_with(marker)) >= 1, what="the sandboxed sleep to start")
        tg.push_text(OWNER, "/stop")
        await h.final_text(OWNER, "(stopped)")
        assert processes_with(marker) == []  # the whole tree is gone once the turn is released
        assert statuses(h, "user") == [("run something slow", "stopped")]
        tg.push_text(OWNER, "and now?")
        await h.final_text(OWNER, "Next.")
        # The unfinished call is not in the history (the API refuses a call without its result).
        assert all(m.get("tool_calls") is None for m in llm.requests[-1]["messages"])


async def test_stop_cancels_the_turns_background_generate_job(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    marker = "318.25"
    generated = f"```python\nimport subprocess\nsubprocess.run(['sleep', '{marker}'])\n```"
    llm.script(
        tool_calls(call("code", {"action": "generate", "task": "wait a long time"})),
        text(generated),  # the code generation request
        slow_text(),  # the turn goes on while the job runs in the background
    )
    async with running_bot(
        tmp_path, tg, llm, code_generate_wait_s=0.2, code_timeout_s=600, code_max_timeout_s=600
    ) as h:
        tg.push_text(OWNER, "generate something slow")
        await tg.wait_for(lambda: len(processes_with(marker)) >= 1, what="the job's sandbox run to start")
        await streaming_preview(tg, OWNER)
        (job,) = h.services.code.jobs.values()
        assert job.status == "running"
        tg.push_text(OWNER, "/stop")
        await h.final_text(OWNER, "(stopped)")
        assert processes_with(marker) == [] and job.status == "cancelled"
        assert not any("Background code job" in t for t in tg.sent_texts(OWNER))
