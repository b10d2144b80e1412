"""Reminders and scheduled tasks through the whole stack: the real bot, the fake Bot API and the fake LLM."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text as sql

from bot.runtime.services import Services
from core_tools.schedule.service import ScheduleService
from tests.support.databases import both_databases
from tests.support.fakes.openai_api import FakeLLM, call, error, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, STRANGER, Harness, running_bot
from tests.support.schedules import local_at, wait_sent

db_kind = both_databases()  # SQLite and PostgreSQL: claiming firings across restarts (db/schedules.py)
pytestmark = pytest.mark.usefixtures("bot_database")  # its bots run on the test's database


def svc(h: Harness | Services) -> ScheduleService:
    services = h.services if isinstance(h, Harness) else h
    return services.schedules.service


def add(h: Harness | Services, **kw: Any) -> int:
    """Create a schedule as the tool would, and wake the delivery job."""
    args: dict[str, Any] = {
        "user_id": OWNER,
        "chat_id": OWNER,
        "chat_type": "private",
        "text": "Call the dentist",
    }
    args.update(kw)
    made = svc(h).create(**args)
    services = h.services if isinstance(h, Harness) else h
    services.schedules.wake()
    return int(made["id"])


def messages_with(tg: FakeTelegram, chat_id: int, needle: str) -> list[dict[str, Any]]:
    return [m for m in tg.messages.get(chat_id, []) if needle in str(m.get("text", ""))]


def db_rows(h: Harness, query: str) -> list[Any]:
    with h.services.engine.connect() as conn:
        return list(conn.execute(sql(query)))


async def test_a_reminder_set_in_chat_arrives_on_time_with_buttons_and_no_llm_call(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        llm.script(
            # An hour ahead, and the service's clock moved on below: a turn slowed down by a loaded machine
            # cannot put a time a few seconds ahead in the past before the tool runs.
            tool_calls(
                call("schedule", {"action": "create", "text": "Call the dentist", "at": local_at(3600)})
            ),
            text("I will remind you."),
        )
        tg.push_text(OWNER, "remind me in an hour to call the dentist")
        await h.final_text(OWNER, "I will remind you.")
        created = json.loads(llm.requests[1]["messages"][-1]["content"])
        assert created["ok"] and len(created["next"]) == 1 and "once" in created["description"]
        requests_before = len(llm.requests)
        real = svc(h).clock
        svc(h).clock = lambda: real() + timedelta(hours=1)  # the hour has passed
        h.services.schedules.wake()
        (firing,) = await wait_sent(h, created["id"])
        (msg,) = messages_with(tg, OWNER, "⏰ Call the dentist")
        assert firing.status == "sent" and firing.message_id == msg["message_id"]
        labels = [b["text"] for row in msg["reply_markup"]["inline_keyboard"] for b in row]
        assert labels == ["Snooze 10 min", "Snooze 1 h", "Done"]
        assert len(llm.requests) == requests_before  # a message reminder makes no LLM request
        assert "Late by" not in msg["text"]


async def test_a_task_runs_a_turn_with_a_tool_and_delivers_the_answer(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        llm.script(tool_calls(call("schedule", {"action": "list"})), text("Your day: **nothing** planned."))
        sid = add(h, text="Summarise my plans", kind="task", at=local_at(2))
        await wait_sent(h, sid)
        delivered = await h.final_text(OWNER, "Your day: nothing planned.")
        assert delivered.startswith("⏰ Scheduled task: Summarise my plans")
        assert "Summarise my plans" in llm.requests[0]["messages"][-1]["content"]
        assert llm.requests[1]["messages"][-1]["role"] == "tool"  # the tool ran inside the task's turn
        purposes = {r[0] for r in db_rows(h, "select purpose from llm_calls")}
        assert purposes == {"scheduled"}


async def test_a_restart_before_the_due_time_still_fires_once(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        sid = add(h, at=local_at(3))
    async with running_bot(tmp_path, tg, llm) as h:
        await wait_sent(h, sid)
    async with running_bot(tmp_path, tg, llm) as h:  # a later restart re-sends nothing recorded as sent
        await h.command(OWNER, "/reminders", "no reminders")
        assert len(messages_with(tg, OWNER, "⏰ Call the dentist")) == 1
        assert [f.status for f in svc(h).store.firings_of(sid)] == ["sent"]


async def test_downtime_over_the_due_time_delivers_late_and_once(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    def created_an_hour_ago(services: Services) -> None:
        # The schedules were made an hour ago, due 59 minutes ago, while the bot was down since.
        real = svc(services).clock
        past = datetime.now(UTC) - timedelta(hours=1)
        svc(services).clock = lambda: past
        add(services, at=local_at(60, past), text="Take the pills")
        add(services, at=local_at(60, past), text="Stretch", repeat="FREQ=MINUTELY;INTERVAL=10")
        svc(services).clock = real

    async with running_bot(tmp_path, tg, llm, setup=created_an_hour_ago) as h:
        pills = await h.final_text(OWNER, "Take the pills")
        stretch = await h.final_text(OWNER, "Stretch")
        assert "Late by 59 min" in pills
        assert "Late by 59 min" in stretch and "5 more times while I was offline" in stretch
        views = svc(h).list_for(OWNER)
        assert len(views) == 1 and views[0]["text"] == "Stretch"
        nxt = datetime.strptime(views[0]["next"][0], "%a %d %b %Y %H:%M").replace(tzinfo=UTC)
        assert timedelta(0) < nxt - datetime.now(UTC) <= timedelta(minutes=10)
    assert (
        len(messages_with(tg, OWNER, "Stretch")) == 1 and len(messages_with(tg, OWNER, "Take the pills")) == 1
    )


@pytest.mark.slow
async def test_a_daily_reminder_across_the_berlin_dst_change(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    # The bot's clock stands at two seconds before Berlin's clocks go forward (29 Mar 2026, 02:00 CET) until
    # the reminder is set, then runs: however long the bot takes to start, the change is still ahead of it.
    base = datetime(2026, 3, 29, 0, 59, 58, tzinfo=UTC)
    started: list[float] = []

    def clock() -> datetime:
        return base + timedelta(seconds=time.monotonic() - started[0]) if started else base

    def setup(services: Services) -> None:
        svc(services).clock = clock
        services.conversations.ensure_user(OWNER, "Ann")
        services.conversations.set_user_timezone(OWNER, "Europe/Berlin")

    async with running_bot(tmp_path, tg, llm, setup=setup) as h:
        sid = add(h, at="2026-03-28T02:30", repeat="FREQ=DAILY", text="Water the plants")
        view = svc(h).list_for(OWNER)[0]
        # 02:30 does not exist on the 29th: it fires at the next valid minute, 03:00 CEST (01:00 UTC).
        assert view["next"] == ["Sun 29 Mar 2026 03:00", "Mon 30 Mar 2026 02:30", "Tue 31 Mar 2026 02:30"]
        started.append(time.monotonic())
        (firing,) = await wait_sent(h, sid)
        assert firing.due_at == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)
        listing = await h.command(OWNER, "/reminders", "Water the plants")
        assert "next: Mon 30 Mar 2026 02:30 (Europe/Berlin)" in listing


async def test_snooze_and_done_buttons_and_who_may_press_them(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        a = add(h, at=local_at(1), text="Reminder A")
        b = add(h, at=local_at(1), text="Reminder B")
        (fa,) = await wait_sent(h, a)
        (fb,) = await wait_sent(h, b)
        answers_before = len(tg.calls_to("answerCallbackQuery"))

        async def press(user: int, data: str, message_id: int | None) -> str:
            n = len(tg.calls_to("answerCallbackQuery"))
            tg.push_callback(user, data, message_id, chat_id=OWNER)
            calls = await tg.wait_for_call("answerCallbackQuery", count=n + 1)
            return str(calls[-1].params.get("text", ""))

        assert "private assistant" in await press(STRANGER, f"sch:done:{fa.id}", fa.message_id)
        assert "not yours" in await press(FRIEND, f"sch:done:{fa.id}", fa.message_id)
        assert await press(OWNER, f"sch:done:{fa.id}", fa.message_id) == "Done."
        await tg.wait_for(lambda: messages_with(tg, OWNER, "✅ Done."), what="the done mark")
        assert messages_with(tg, OWNER, "✅ Done.")[0]["text"].startswith("⏰ Reminder A")
        assert "Snoozed until" in await press(OWNER, f"sch:s10:{fb.id}", fb.message_id)
        await tg.wait_for(lambda: messages_with(tg, OWNER, "💤 Snoozed until"), what="the snooze mark")
        msg_b = messages_with(tg, OWNER, "Reminder B")[0]
        assert "💤 Snoozed until" in msg_b["text"] and "reply_markup" not in msg_b
        assert len(tg.calls_to("answerCallbackQuery")) == answers_before + 4
        # Ten minutes later (the service's clock moved on) the snoozed reminder comes again, with buttons.
        real = svc(h).clock
        svc(h).clock = lambda: real() + timedelta(minutes=10, seconds=1)
        h.services.schedules.wake()
        again = await h.final_text(OWNER, "⏰ Snoozed reminder: Reminder B")
        assert again and messages_with(tg, OWNER, "Snoozed reminder")[0]["reply_markup"]


async def test_reminders_lists_with_cancel_buttons_and_hides_them_from_others(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        one = add(h, at=local_at(3600), text="Pay rent")
        add(h, at=local_at(7200), text="Weekly review", repeat="FREQ=WEEKLY")
        listing = await h.command(OWNER, "/reminders", "Your reminders")
        assert "Pay rent" in listing and "Weekly review" in listing and "every week" in listing
        msg = tg.last_message(OWNER)
        buttons = [b["callback_data"] for row in msg["reply_markup"]["inline_keyboard"] for b in row]
        assert f"sch:cancel:{one}" in buttons
        await h.command(FRIEND, "/reminders", "no reminders")  # another user sees none of them
        n = len(tg.calls_to("answerCallbackQuery"))
        tg.push_callback(FRIEND, f"sch:cancel:{one}", msg["message_id"], chat_id=OWNER)
        calls = await tg.wait_for_call("answerCallbackQuery", count=n + 1)
        assert "no schedule with id" in calls[-1].params["text"]
        assert svc(h).store.get(one).status == "active"  # type: ignore[union-attr]
        tg.push_callback(OWNER, f"sch:cancel:{one}", msg["message_id"])
        calls = await tg.wait_for_call("answerCallbackQuery", count=n + 2)
        assert calls[-1].params["text"] == f"Cancelled #{one}."
        await tg.wait_for(lambda: "Pay rent" not in tg.last_message(OWNER)["text"], what="refreshed list")
        assert svc(h).store.get(one).status == "cancelled"  # type: ignore[union-attr]


async def test_a_task_over_the_cap_makes_no_llm_request_and_the_user_is_told(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, budget_daily_tokens=0) as h:
        sid = add(h, text="Summarise the news", kind="task", at=local_at(1))
        told = await h.final_text(OWNER, "could not run")
        assert "Usage cap reached" in told and llm.requests == []
        (firing,) = await wait_sent(h, sid)
        assert firing.status == "failed"


async def test_limits_reach_the_model_as_errors(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    async with running_bot(tmp_path, tg, llm, schedule_max_active=1) as h:
        first = {"action": "create", "text": "a", "at": local_at(3600)}
        second = {"action": "create", "text": "b", "at": local_at(3600)}
        often = {
            "action": "create",
            "text": "c",
            "at": local_at(3600),
            "repeat": "*/5 * * * *",
            "kind": "task",
        }
        llm.script(tool_calls(call("schedule", first), call("schedule", second)), text("One of two."))
        tg.push_text(OWNER, "two reminders please")
        await h.final_text(OWNER, "One of two.")
        results = [m["content"] for m in llm.requests[1]["messages"] if m["role"] == "tool"]
        # The two calls of one round run side by side: either may be the one that is refused.
        refused = [r for r in results if "already has 1 active schedules" in r]
        [made] = [json.loads(r) for r in results if r not in refused]
        assert len(refused) == 1 and made["ok"]
        svc(h).cancel(OWNER, made["id"])
        llm.script(tool_calls(call("schedule", often)), text("Too often."))
        tg.push_text(OWNER, "every 5 minutes summarise the news")
        await h.final_text(OWNER, "Too often.")
        assert "at most every 15 min" in llm.requests[-1]["messages"][-1]["content"]
        assert svc(h).list_for(OWNER) == []


@pytest.mark.slow
async def test_transient_errors_are_retried_and_a_block_pauses_the_schedules(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        tg.fail_next("sendMessage", error="bad_gateway")
        sid = add(h, at=local_at(1), text="Retry me")
        (firing,) = await wait_sent(h, sid)
        assert firing.status == "sent" and firing.attempts == 1  # the second try went through
        assert len(messages_with(tg, OWNER, "Retry me")) == 1
        tg.fail_next("sendMessage", error="forbidden")
        daily = add(h, at=local_at(1), text="Blocked", repeat="FREQ=DAILY")
        (blocked,) = await wait_sent(h, daily)
        assert blocked.status == "failed"
        assert svc(h).store.get(daily).status == "paused"  # type: ignore[union-attr]


async def test_a_firing_cut_while_sending_is_resent_marked_as_a_possible_copy(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        sid = add(h, at=local_at(3600), text="Crash test")
        service = svc(h)
        real = service.clock
        service.clock = lambda: real() + timedelta(hours=2)
        (fid,) = service.fire_due()
        service.mark_sending([fid])  # the bot stops here: the request may or may not have left
        service.clock = real
    async with running_bot(tmp_path, tg, llm) as h:
        resent = await h.final_text(OWNER, "Crash test")
        assert "I was restarted while sending this" in resent
        (firing,) = await wait_sent(h, sid)
        assert firing.status == "sent" and firing.resend


async def test_a_task_failing_three_times_in_a_row_is_paused_and_the_user_told(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        llm.script(error(500), error(500), error(500))
        sid = add(h, text="Check the server", kind="task", at=local_at(1), repeat="FREQ=MINUTELY;INTERVAL=15")
        first = await h.final_text(OWNER, "could not run")
        assert "It will run again at its next time." in first
        real = svc(h).clock
        for k in (1, 2):  # the service's clock moves on to the next two occurrences
            svc(h).clock = lambda k=k: real() + timedelta(minutes=15 * k, seconds=1)  # type: ignore[misc]
            h.services.schedules.wake()
            await wait_sent(h, sid, n=k + 1)
        told = await h.final_text(OWNER, "so I paused it")
        assert "failed 3 times in a row" in told and len(llm.requests) == 3
        assert svc(h).store.get(sid).status == "paused"  # type: ignore[union-attr]
        listing = await h.command(OWNER, "/reminders", "Check the server")
        assert "paused (it failed 3 times in a row)" in listing
        buttons = [
            b["callback_data"]
            for row in tg.last_message(OWNER)["reply_markup"]["inline_keyboard"]
            for b in row
        ]
        assert f"sch:resume:{sid}" in buttons


async def test_timezone_command_moves_future_firings_of_local_schedules(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        at = local_at(10 * 3600)  # in Tokyo this wall time is an hour from now
        sid = add(h, at=at, text="Weekly review", repeat="FREQ=WEEKLY")
        before = svc(h).store.get(sid)
        await h.command(OWNER, "/timezone Asia/Tokyo", "Time zone set")
        after = svc(h).store.get(sid)
        assert before and after and after.next_fire_at and before.next_fire_at
        # The same wall-clock time, now in Tokyo (UTC+9): nine hours earlier in absolute time.
        assert before.next_fire_at - after.next_fire_at == timedelta(hours=9)
        listing = await h.command(OWNER, "/reminders", "Weekly review")
        wall = datetime.fromisoformat(at)
        assert f"next: {wall:%a %d %b %Y %H:%M} (Asia/Tokyo)" in listing


async def test_a_task_cut_by_a_restart_is_not_run_again_and_the_user_is_told(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        sid = add(h, at=local_at(3600), text="Summarise the news", kind="task")
        service = svc(h)
        real = service.clock
        service.clock = lambda: real() + timedelta(hours=2)
        (fid,) = service.fire_due()
        service.mark_sending([fid])  # the bot stops while the task's turn runs
        service.clock = real
    async with running_bot(tmp_path, tg, llm) as h:
        told = await h.final_text(OWNER, "I was restarted while running your scheduled task")
        assert f"#{sid}" in told and "did not run it again" in told
        (firing,) = svc(h).store.firings_of(sid)
        assert firing.status == "failed" and llm.requests == []


async def test_rules_that_stalled_everyone_get_a_prompt_answer_and_other_users_are_served(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    # What an attacker sent: a minutely rule from the year 1000 (it never returned) or 1900 (28 s, then
    # every /reminders took 15 s), and a rule that never happens (10 s before it was refused).
    async with running_bot(tmp_path, tg, llm) as h:
        attacks: list[tuple[dict[str, Any], str]] = [
            ({"at": "1000-01-01T00:00", "repeat": "FREQ=MINUTELY"}, "ok"),
            ({"at": "1900-01-01T00:00", "repeat": "FREQ=MINUTELY"}, "ok"),
            ({"at": local_at(60), "repeat": "FREQ=MINUTELY;BYMONTH=2;BYMONTHDAY=30"}, "never happens"),
        ]
        for n, (args, expected) in enumerate(attacks):
            llm.script(
                tool_calls(call("schedule", {"action": "create", "text": f"attack {n}", **args})),
                text(f"Answered {n}."),
            )
            tg.push_text(OWNER, f"attack {n}")
            await h.command(FRIEND, "/help", "Commands:")  # another user is served meanwhile
            await h.final_text(OWNER, f"Answered {n}.", timeout=30)
            result = json.loads(llm.requests[-1]["messages"][-1]["content"])
            if expected == "ok":
                # Accepted, and worked out from now: its next times are the next minutes.
                assert result["ok"] and len(result["next"]) == 3, result
                nxt = datetime.strptime(result["next"][0], "%a %d %b %Y %H:%M").replace(tzinfo=UTC)
                assert timedelta(0) < nxt - datetime.now(UTC) <= timedelta(minutes=2)
                assert "from 01 Jan" not in result["description"]  # the start moved forward
            else:
                assert result["ok"] is False and expected in result["error"], result
        listing = await h.command(OWNER, "/reminders", "attack 1")
        assert "attack 0" in listing and "attack 2" not in listing
        await h.command(FRIEND, "/help", "Commands:")


async def test_a_rule_stored_before_the_bounds_fires_and_lists_without_stalling_the_bot(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        now = datetime.now(UTC)
        # As a row made before starts were moved forward: minutely since 1900, due now.
        row = svc(h).store.add(
            user_id=OWNER,
            chat_id=OWNER,
            chat_type="private",
            kind="message",
            text="Old minutely",
            start_local="1900-01-01T00:00:00",
            timezone=None,
            zone_used="UTC",
            repeat="FREQ=MINUTELY",
            repeat_kind="rrule",
            until_at=None,
            count=None,
            fired_count=0,
            status="active",
            failures=0,
            next_fire_at=now.replace(second=0, microsecond=0),
        )
        h.services.schedules.wake()
        await h.final_text(OWNER, "⏰ Old minutely", timeout=30)
        await h.command(FRIEND, "/help", "Commands:")
        listing = await h.command(OWNER, "/reminders", "Old minutely")
        assert "every minute" in listing
        later = svc(h).store.get(row.id)
        assert later is not None and later.next_fire_at is not None and later.next_fire_at > now
