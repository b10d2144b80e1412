"""What scheduled tasks cost, end to end: the real bot, the fake Bot API and the fake LLM (it reports usage).

A task's forecast when it is created (a stated default, then the median of the user's task runs), its
monthly limit refusing a run before any request, a run far costlier than usual pausing the task (Resume
button), and /reminders showing each task's spend this month.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from core_tools.usage.prices import PriceTable, parse_prices
from tests.bot.test_schedules import add, db_rows, local_at, messages_with, svc, wait_sent
from tests.support.fakes.openai_api import FakeLLM, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, Harness, running_bot

PRICES = '{"fake-model": [1.0, 2.0]}'  # USD per million input, output tokens
EVERY_15_MIN = "FREQ=MINUTELY;INTERVAL=15"


def usd(value: float) -> str:
    """As the bot writes money (core_tools.usage.amounts.usd)."""
    return "$0" if value == 0 else (f"${value:.4f}" if value < 1 else f"${value:,.2f}")


def task_cost(h: Harness, sid: int, prices: str = PRICES) -> float:
    """The USD of every LLM call recorded against a task, priced as the bot prices them."""
    rows = db_rows(
        h, f"select model, prompt_tokens, completion_tokens from llm_calls where schedule_id = {sid}"
    )
    table = PriceTable(parse_prices(prices))
    return sum(table.cost(m, p, c) or 0.0 for m, p, c in rows)


def tool_result(llm: FakeLLM, request: int) -> dict[str, Any]:
    """The schedule tool's result the model received in request number `request`."""
    result: dict[str, Any] = json.loads(llm.requests[request]["messages"][-1]["content"])
    return result


async def run_next(h: Harness, sid: int, k: int, real: Callable[[], datetime]) -> None:
    """Move the schedule service's clock (`real`: its own) to the task's k-th occurrence after its first;
    wait for that run."""
    svc(h).clock = lambda: real() + timedelta(minutes=15 * k, seconds=1)
    h.services.schedules.wake()
    await wait_sent(h, sid, n=k + 1)


async def test_a_new_task_is_forecast_from_a_default_then_from_the_median_of_task_runs(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    daily = {"action": "create", "text": "Summarise the news", "kind": "task", "repeat": "FREQ=DAILY"}
    async with running_bot(tmp_path, tg, llm, llm_prices=PRICES) as h:
        llm.script(tool_calls(call("schedule", {**daily, "at": local_at(3600)})), text("Set."))
        tg.push_text(OWNER, "every day summarise the news")
        await h.final_text(OWNER, "Set.")
        first = tool_result(llm, 1)["forecast"]
        # No task has run yet: the stated default, 6,000 + 600 tokens at $1 / $2 per million.
        assert first["per_run_usd"] == 0.0072 and first["runs_in_30_days"] == 30
        assert first["text"] == (
            "Forecast cost: about $0.0072 per run and $0.2160 a month (30 runs in the next 30 days), from a "
            "default of 6,000 input + 600 output tokens per run at fake-model's price, since there are no "
            "task runs yet."
        )

        # Three one-time tasks run, with answers of different lengths.
        runs = []
        for answer in ("Short.", "A much longer answer " * 20, "A medium answer " * 5):
            llm.script(text(answer))
            sid = add(h, text="Check the weather", kind="task", at=local_at(1))
            await wait_sent(h, sid)
            (row,) = db_rows(
                h,
                f"select sum(prompt_tokens), sum(completion_tokens) from llm_calls where schedule_id = {sid}",
            )
            runs.append((int(row[0]), int(row[1])))
        prompts = sorted(p for p, _ in runs)
        completions = sorted(c for _, c in runs)
        median_cost = (prompts[1] * 1.0 + completions[1] * 2.0) / 1e6

        n = len(llm.requests)
        llm.script(tool_calls(call("schedule", {**daily, "at": local_at(7200)})), text("Set again."))
        tg.push_text(OWNER, "and another one")
        await h.final_text(OWNER, "Set again.")
        second = tool_result(llm, n + 1)["forecast"]
        assert second["per_run_usd"] == round(median_cost, 6)
        assert second["per_month_usd"] == round(median_cost * 30, 6)
        assert "from the median of your last 3 task runs at fake-model's price" in second["text"]

        # Updating a task answers with its forecast too; a reminder has none.
        n = len(llm.requests)
        update = {"action": "update", "id": tool_result(llm, 1)["id"], "max_cost_per_month": 0.01}
        llm.script(tool_calls(call("schedule", update)), text("Limited."))
        tg.push_text(OWNER, "at most 10 cents a month for the news")
        await h.final_text(OWNER, "Limited.")
        updated = tool_result(llm, n + 1)
        assert updated["max_cost_per_month"] == 0.01
        assert "That is over its limit of $0.0100 a month" in updated["forecast"]["text"]
        assert "forecast" not in svc(h).create(
            user_id=OWNER, chat_id=OWNER, chat_type="private", text="Stretch", at=local_at(60)
        )


async def test_a_task_over_its_monthly_limit_is_skipped_before_any_request_and_the_user_told_once(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, llm_prices=PRICES) as h:
        llm.script(text("Here is the news."))
        # A limit of $0.0001: the first run (a few thousand tokens) spends more than that.
        sid = add(
            h,
            text="Summarise the news",
            kind="task",
            at=local_at(1),
            repeat=EVERY_15_MIN,
            max_cost_per_month=0.0001,
        )
        real = svc(h).clock
        await wait_sent(h, sid)
        await h.final_text(OWNER, "Here is the news.")
        spent = task_cost(h, sid)
        assert spent > 0.0001 and len(llm.requests) == 1
        listing = await h.command(OWNER, "/reminders", "Summarise the news")
        assert f"spent this month: {usd(spent)} of $0.0001" in listing

        await run_next(h, sid, 1, real)
        told = await h.final_text(OWNER, "reached its limit")
        assert told.startswith(
            f"Scheduled task #{sid} reached its limit of $0.0001 a month: {usd(spent)} is spent"
        )
        assert "Runs until then are skipped." in told
        assert len(llm.requests) == 1  # refused before anything was sent
        await run_next(h, sid, 2, real)
        assert len(llm.requests) == 1
        assert svc(h).store.get(sid).status == "active"  # type: ignore[union-attr]  # it runs next month
        assert [f.status for f in svc(h).store.firings_of(sid)] == ["sent", "failed", "failed"]

        # Raised, the limit lets the next run through.
        svc(h).update(OWNER, sid, max_cost_per_month=5)
        llm.script(text("More news."))
        await run_next(h, sid, 3, real)
        await h.final_text(OWNER, "More news.")
        assert len(llm.requests) == 2
        assert len(messages_with(tg, OWNER, "reached its limit")) == 1  # told at the first skipped run only


async def test_a_run_far_costlier_than_usual_pauses_the_task_and_resume_restarts_it(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    prices = '{"fake-model": [0.0, 10.0]}'  # only the answer costs: a long answer is a costly run
    async with running_bot(tmp_path, tg, llm, llm_prices=prices) as h:
        llm.script(text("Fine."), text("Fine."), text("Fine."), text("All is well. " * 100))
        sid = add(h, text="Check the server", kind="task", at=local_at(1), repeat=EVERY_15_MIN)
        real = svc(h).clock
        await wait_sent(h, sid)
        for k in (1, 2):
            await run_next(h, sid, k, real)
        assert svc(h).store.get(sid).status == "active"  # type: ignore[union-attr]
        await run_next(h, sid, 3, real)
        await h.final_text(OWNER, "All is well. All is well.")  # the costly run's answer is delivered
        notice = await h.final_text(OWNER, "so I paused the task")
        assert notice.startswith(
            f"This run of your scheduled task #{sid} (\u201cCheck the server\u201d) cost $0."
        )
        assert "times the median of its 3 earlier runs ($0.00002" in notice
        (msg,) = messages_with(tg, OWNER, "so I paused the task")
        buttons = [b["callback_data"] for row in msg["reply_markup"]["inline_keyboard"] for b in row]
        assert buttons == [f"sch:resume:{sid}"]
        paused = svc(h).store.get(sid)
        assert paused is not None and paused.status == "paused" and paused.pause_reason == "cost"
        listing = await h.command(OWNER, "/reminders", "Check the server")
        assert "paused (a run cost far more than usual)" in listing
        assert f"spent this month: {usd(task_cost(h, sid, prices))}" in listing

        n = len(tg.calls_to("answerCallbackQuery"))
        tg.push_callback(OWNER, f"sch:resume:{sid}", msg["message_id"])
        calls = await tg.wait_for_call("answerCallbackQuery", count=n + 1)
        assert calls[-1].params["text"] == f"Resumed #{sid}."
        assert svc(h).store.get(sid).status == "active"  # type: ignore[union-attr]
