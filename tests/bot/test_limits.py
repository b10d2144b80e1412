"""One reply cannot start unbounded work, and caps hold for parallel calls (issue 17, items 3 and 4).

The real bot against the fake Bot API and the fake LLM; code runs in the real bwrap sandbox; usage rows are
read from the real SQLite file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from core_tools.usage.amounts import tokens_str
from db.models import CodeExecution, LLMCall, Message
from tests.support.fakes.openai_api import FakeLLM, Step, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, Harness, running_bot

# Prints when it started and ended, read from inside the sandbox (the wall clock is the host's).
TIMED = "import time\nstart = time.time()\ntime.sleep(0.4)\nprint(start, time.time())"


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool results a request carries to the model, parsed."""
    return [json.loads(m["content"]) for m in body["messages"] if m["role"] == "tool"]


def code_runs(h: Harness) -> list[dict[str, Any]]:
    with h.services.engine.connect() as conn:
        return [dict(r) for r in conn.execute(select(CodeExecution)).mappings()]


def most_at_once(intervals: list[tuple[float, float]]) -> int:
    """The largest number of intervals that overlap at one instant."""
    events = sorted(
        [(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1])
    )
    now = peak = 0
    for _, step in events:
        now += step
        peak = max(peak, now)
    return peak


def intervals(rows: list[dict[str, Any]]) -> list[tuple[float, float]]:
    out = []
    for r in rows:
        start, end = (float(x) for x in str(r["stdout"]).split())
        out.append((start, end))
    return out


def fan_out(n: int, program: str, answer: str = "All done.") -> Any:
    """A responder: a user message gets `n` parallel `code` execute calls, a tool round gets `answer`."""

    def respond(body: dict[str, Any]) -> Step:
        if body["messages"][-1]["role"] == "user":
            # Each call differs (the agent answers a repeated identical call without running it).
            calls = [call("code", {"action": "execute", "code": f"# run {i}\n{program}"}) for i in range(n)]
            return tool_calls(*calls)
        return text(answer)

    return respond


@pytest.mark.slow
async def test_parallel_code_calls_run_within_the_global_and_per_user_bounds(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.default = fan_out(10, TIMED)
    async with running_bot(
        tmp_path, tg, llm, code_max_concurrent=3, code_max_concurrent_per_user=2, code_queue_wait_s=120
    ) as h:
        tg.push_text(OWNER, "run ten programs")
        tg.push_text(FRIEND, "run ten programs too")
        await h.final_text(OWNER, "All done.", timeout=90)
        await h.final_text(FRIEND, "All done.", timeout=90)
        rows = code_runs(h)
        # Beyond the bounds the runs queued: all twenty ran, and all succeeded.
        assert len(rows) == 20 and all(r["success"] for r in rows)
        finals = [b for b in llm.requests if b["messages"][-1]["role"] == "tool"]  # each chat's, in any order
        assert len(finals) == 2
        for body in finals:
            assert [r["success"] for r in tool_results(body)] == [True] * 10
        assert most_at_once(intervals(rows)) <= 3
        for user in (OWNER, FRIEND):
            assert most_at_once(intervals([r for r in rows if r["user_id"] == user])) <= 2
        assert h.services.code.runs.peak == 3 and h.services.code.runs.in_use() == 0


async def test_runs_beyond_the_bound_get_a_clear_error_when_they_cannot_wait(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.default = fan_out(20, TIMED)
    async with running_bot(
        tmp_path, tg, llm, code_max_concurrent=2, code_max_concurrent_per_user=1, code_queue_wait_s=0
    ) as h:
        tg.push_text(OWNER, "run twenty programs")
        await h.final_text(OWNER, "All done.", timeout=60)
        results = tool_results(llm.requests[-1])
        ran = [r for r in results if r.get("success")]
        refused = [r for r in results if "error" in r]
        assert len(ran) + len(refused) == 20 and ran and refused
        assert all(
            "code is not run now: you already have 1 running (at most 1 per user)" in r["error"]
            for r in refused
        )
        rows = code_runs(h)
        assert len(rows) == len(ran) and most_at_once(intervals(rows)) == 1


def generate_fan_out(n: int, program: str, delay: float) -> Any:
    """A responder: a user message gets `n` parallel generate calls; each generation answers `program`."""

    def respond(body: dict[str, Any]) -> Step:
        if "tools" not in body and any(m["role"] == "tool" for m in body["messages"]):
            return text("All done.")  # the turn's closing answer without tools (a cap stopped tool use)
        if "tools" not in body:  # the focused generation request
            return text(f"```python\n{program}\n```", delay=delay)
        if body["messages"][-1]["role"] == "user":
            return tool_calls(*[call("code", {"action": "generate", "task": f"task {i}"}) for i in range(n)])
        return text("All done.")

    return respond


def generation_requests(llm: FakeLLM) -> list[dict[str, Any]]:
    return [b for b in llm.requests if "tools" not in b]


def turn_requests(llm: FakeLLM) -> list[dict[str, Any]]:
    """The turn's own requests (tools offered, or tool results carried; a focused generation's has neither):
    a background generation's request may come after the turn's last one."""
    return [b for b in llm.requests if "tools" in b or any(m["role"] == "tool" for m in b["messages"])]


async def test_twelve_generate_calls_start_at_most_the_job_bound(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.default = generate_fan_out(12, "print(2 + 2)", delay=1.0)
    async with running_bot(
        tmp_path, tg, llm, code_max_jobs=4, code_max_jobs_per_user=2, code_generate_wait_s=0.2
    ) as h:
        tg.push_text(OWNER, "write twelve programs")
        await h.final_text(OWNER, "All done.", timeout=120)
        results = tool_results(turn_requests(llm)[-1])
        started = [r for r in results if r.get("status") == "running"]
        refused = [r for r in results if "error" in r]
        assert len(started) == 2 and len(refused) == 10
        assert all(
            "no new code generation started: you already have 2 running (at most 2 per user)" in r["error"]
            for r in refused
        )
        await tg.wait_for(
            lambda: sum("Background code job" in t for t in tg.sent_texts(OWNER)) == 2, what="two job results"
        )
        assert len(generation_requests(llm)) == 2  # only two generations ever reached the model
        assert h.services.code.generations.in_use() == 0
        # The slots are free again: the next generate call starts.
        tg.push_text(OWNER, "one more")
        await tg.wait_for(lambda: len(generation_requests(llm)) == 4, what="two more generations")


async def test_parallel_generations_cannot_pass_a_daily_token_cap_together(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    # Each generation's reply is about 500 tokens; a request's completion may be at most 600.
    program = "# " + "x" * 1900 + "\nprint(1)"
    llm.default = generate_fan_out(20, program, delay=0.3)
    async with running_bot(
        tmp_path,
        tg,
        llm,
        budget_daily_tokens=10**7,
        llm_max_completion_tokens=600,
        code_max_jobs=20,
        code_max_jobs_per_user=20,
        code_max_concurrent=20,
        code_max_concurrent_per_user=20,
    ) as h:
        # The cap is measured, not guessed: a first request (system prompt and every tool's schema, which
        # grow with every tool added) plus about two generations (~0.6k each) fit, a third does not.
        llm.script(text("Hello."))
        tg.push_text(OWNER, "hi")
        await h.final_text(OWNER, "Hello.")
        with h.services.engine.connect() as conn:
            warmup = [
                r["prompt_tokens"] + r["completion_tokens"] for r in conn.execute(select(LLMCall)).mappings()
            ]
        cap = sum(warmup) + warmup[0] + 1400
        h.services.usage_service.set_cap(by=OWNER, user_id=OWNER, period="daily", kind="tokens", limit=cap)
        tg.push_text(OWNER, "write twenty programs")
        await h.final_text(OWNER, "All done.", timeout=60)
        with h.services.engine.connect() as conn:
            rows = [dict(r) for r in conn.execute(select(LLMCall)).mappings()]
        # The turn's closing answer ("final") is exempt by design; everything else counts.
        spent = [r["prompt_tokens"] + r["completion_tokens"] for r in rows if r["purpose"] != "final"]
        generations = [r for r in rows if r["purpose"] == "code_generate"]
        assert sum(spent) <= cap + max(spent), spent  # overshoot: at most one request
        assert 1 <= len(generations) < 20
        assert all(body.get("max_completion_tokens") == 600 for body in llm.requests)
        # The generations that were refused told the model why, in the cap's words.
        results = tool_results(turn_requests(llm)[-1])
        stopped = [r for r in results if not r.get("success")]
        assert len(stopped) == 20 - len(generations)
        assert all(
            f"Usage cap reached: your daily token cap is {tokens_str(cap)} tokens" in r["error"]
            for r in stopped
        )
        assert h.services.usage_service.reserved(OWNER) == 0  # every reservation was settled

        # The next message is refused with the same clear words, and it stays stored.
        tg.push_text(OWNER, "and another one")
        refusal = await h.final_text(OWNER, "Usage cap reached")
        assert "daily token cap" in refusal
        with h.services.engine.connect() as conn:
            status = conn.execute(select(Message.status).where(Message.content == "and another one")).scalar()
        assert status == "refused"
