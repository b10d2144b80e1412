"""Check-ins through the whole stack: the real bot, the fake Bot API (with its button presses) and the fake
LLM, the schedule service's clock moved on to each check-in time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from db.models import Checkin, Memory, MemoryChange, Schedule, ScheduleFiring
from tests.support.databases import both_databases
from tests.support.fakes.openai_api import FakeLLM, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, Harness, rows, running_bot

db_kind = both_databases()  # SQLite and PostgreSQL
pytestmark = pytest.mark.usefixtures("bot_database")


def checkin_schedule(h: Harness, user: int = OWNER) -> Any:
    (row,) = [
        r
        for r in rows(h, Schedule)
        if r["kind"] == "checkin" and r["user_id"] == user and r["status"] == "active"
    ]
    return row


def firings(h: Harness, schedule_id: int) -> list[Any]:
    return [f for f in rows(h, ScheduleFiring) if f["schedule_id"] == schedule_id]


async def fire_next(h: Harness, user: int = OWNER) -> Any:
    """Move the schedules' clock to the user's next check-in time, wake the runner, wait for that firing to
    be done with (sent or skipped); return it."""
    sched = checkin_schedule(h, user)
    before = len(firings(h, sched["id"]))
    at = sched["next_fire_at"]
    h.services.schedules.service.clock = lambda: at + timedelta(seconds=1)
    h.services.schedules.wake()

    def done() -> Any:
        found = firings(h, sched["id"])
        if len(found) > before and found[-1]["status"] in ("sent", "skipped", "failed"):
            return found[-1]
        return None

    return await h.tg.wait_for(done, what="the check-in firing done with")


def checkin_messages(tg: FakeTelegram, chat_id: int) -> list[dict[str, Any]]:
    return [m for m in tg.messages.get(chat_id, []) if str(m.get("text", "")).startswith("🔔 Check-in")]


def labels(msg: dict[str, Any]) -> list[str]:
    return [b["text"] for row in msg.get("reply_markup", {}).get("inline_keyboard", []) for b in row]


def data_of(msg: dict[str, Any]) -> list[str]:
    return [b["callback_data"] for row in msg.get("reply_markup", {}).get("inline_keyboard", []) for b in row]


async def goal(
    h: Harness,
    content: str,
    *,
    expires_in: timedelta | None = None,
    quiet: timedelta | None = None,
    user: int = OWNER,
) -> str:
    """A mid-term goal of the user, near its expiry or not mentioned for a while."""
    stored = await h.services.memory.store(user, "mid", content, category="goal", certainty=0.7, dedupe=False)
    mid = str(stored["memory"]["id"])
    values: dict[str, Any] = {}
    now = datetime.now(UTC)
    if expires_in is not None:
        values["expires_at"] = now + expires_in
    if quiet is not None:
        values["updated_at"] = now - quiet
    with h.services.engine.begin() as conn:
        conn.execute(update(Memory).where(Memory.public_id == mid).values(**values))
    return mid


def memory(h: Harness, mid: str) -> Any:
    with h.services.engine.connect() as conn:
        return conn.execute(select(Memory).where(Memory.public_id == mid)).mappings().first()


async def press(h: Harness, data: str, message_id: int, user: int = OWNER) -> str:
    n = len(h.tg.calls_to("answerCallbackQuery"))
    h.tg.push_callback(user, data, message_id, chat_id=user)
    calls = await h.tg.wait_for_call("answerCallbackQuery", count=n + 1)
    return str(calls[-1].params.get("text", ""))


async def test_nothing_due_sends_nothing_and_asks_the_llm_nothing(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        # A goal far from its expiry and mentioned recently: nothing to say about it.
        await goal(h, "Learn Portuguese this year", expires_in=timedelta(days=60))
        reply = await h.command(OWNER, "/checkin daily 09:00", "Check-in set")
        assert "daily at 09:00 (UTC)" in reply and "costs nothing" in reply
        sent_before, requests_before = len(tg.sent_texts(OWNER)), len(llm.requests)
        for _ in range(3):  # three silent days
            firing = await fire_next(h)
            assert firing["status"] == "skipped" and firing["message_id"] is None
        assert len(tg.sent_texts(OWNER)) == sent_before
        assert len(llm.requests) == requests_before == 0
        state = await h.command(OWNER, "/checkin", "Check-in:")
        assert "nothing was due, nothing sent" in state


async def test_a_goal_near_expiry_gets_one_message_whose_buttons_change_memory(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        mid = await goal(h, "Run a half marathon in April", expires_in=timedelta(days=3))
        await goal(h, "Friend's private goal", expires_in=timedelta(days=1), user=FRIEND)
        await h.command(OWNER, "/checkin daily 09:00", "Check-in set")
        await h.command(FRIEND, "/checkin daily 09:00", "Check-in set")  # due together: one batch
        firing = await fire_next(h)
        assert firing["status"] == "sent"
        (msg,) = checkin_messages(tg, OWNER)
        await tg.wait_for(lambda: checkin_messages(tg, FRIEND), what="the friend's check-in")
        (theirs,) = checkin_messages(tg, FRIEND)
        assert "Friend's private goal" in theirs["text"] and "half marathon" not in theirs["text"]
        assert msg["message_id"] == firing["message_id"]
        assert "Run a half marathon in April" in msg["text"] and "expires in" in msg["text"]
        assert labels(msg) == ["Still on", "Done", "Drop"]
        assert data_of(msg) == [f"ci:still:{mid}", f"ci:done:{mid}", f"ci:drop:{mid}"]
        assert "Friend" not in msg["text"]  # each check-in speaks of its user's own rows only
        assert len(llm.requests) == 0  # the template: no LLM request
        now = h.services.schedules.service.clock()

        # Still on: the expiry is renewed (the mid-term TTL from now), the certainty kept, the change logged.
        assert "Kept" in await press(h, f"ci:still:{mid}", msg["message_id"])
        kept = memory(h, mid)
        assert kept["expires_at"] > now + timedelta(days=80) and kept["certainty"] == pytest.approx(0.7)
        await tg.wait_for(
            lambda: "still on" in checkin_messages(tg, OWNER)[0]["text"], what="the message updated"
        )
        assert labels(checkin_messages(tg, OWNER)[0]) == []

        # Done: marked done in memory, with its history.
        assert "Marked done" in await press(h, f"ci:done:{mid}", msg["message_id"])
        done = memory(h, mid)
        assert done["content"].startswith("Done ") and done["content"].endswith(
            "Run a half marathon in April"
        )
        history = [c for c in rows(h, MemoryChange) if c["memory_id"] == mid]
        assert [c["reason"] for c in history][-1] == "marked done at a check-in"
        assert history[-1]["old_text"] == "Run a half marathon in April"

        # Drop: forgotten, and undoable.
        assert "Dropped" in await press(h, f"ci:drop:{mid}", msg["message_id"])
        assert memory(h, mid) is None
        await tg.wait_for(
            lambda: "Undo drop" in labels(checkin_messages(tg, OWNER)[0]), what="the undo button"
        )
        assert "back" in await press(h, f"ci:undo:{mid}", msg["message_id"])
        assert memory(h, mid) is not None

        # Another user's press acts on their own rows only: the owner's goal is not theirs.
        assert "not in your memory" in await press(h, f"ci:still:{mid}", msg["message_id"], user=FRIEND)


async def test_two_ignored_check_ins_back_off_and_a_press_resets(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        mid = await goal(
            h, "Write the grant proposal", expires_in=timedelta(days=80), quiet=timedelta(days=30)
        )
        await h.command(OWNER, "/checkin daily 09:00", "Check-in set")
        assert (await fire_next(h))["status"] == "sent"  # day 1
        assert (await fire_next(h))["status"] == "sent"  # day 2: day 1 ignored
        third = await fire_next(h)  # day 3: day 2 ignored too, so it backs off
        assert third["status"] == "sent"
        msgs = checkin_messages(tg, OWNER)
        assert len(msgs) == 3 and "every other day" in msgs[-1]["text"]
        assert "every other day" not in msgs[1]["text"]
        assert (await fire_next(h))["status"] == "skipped"  # day 4: backed off
        assert (await fire_next(h))["status"] == "sent"  # day 5
        state = await h.command(OWNER, "/checkin", "Check-in:")
        assert "Backed off to every other day" in state
        await press(h, f"ci:still:{mid}", checkin_messages(tg, OWNER)[-1]["message_id"])
        (row,) = rows(h, Checkin)
        assert row["level"] == 0 and row["ignored"] == 0 and not row["awaiting"]
        # Now the goal was mentioned (Still on): nothing is due, nothing is sent.
        assert (await fire_next(h))["status"] == "skipped"


async def test_bad_input_groups_and_off(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    group = -100123
    async with running_bot(tmp_path, tg, llm, allowed_chat_ids=str(group)) as h:
        for bad in ("/checkin daily", "/checkin daily 25:00", "/checkin weekly xyz 10:00", "/checkin hourly"):
            assert "Usage: /checkin daily HH:MM" in await h.command(OWNER, bad, "Usage")
        assert "not on" in await h.command(OWNER, "/checkin off", "Check-ins")
        assert "Check-ins are off" in await h.command(OWNER, "/checkin", "Check-ins are off")
        reply = await h.command(OWNER, "/checkin weekly mon 18:00", "Check-in set")
        assert "weekly on Mon at 18:00" in reply
        sched = checkin_schedule(h)
        assert sched["next_fire_at"].weekday() == 0 and sched["chat_id"] == OWNER
        # A check-in is not a reminder: /reminders does not list it.
        assert "checkin" not in (await h.command(OWNER, "/reminders", "")).lower()
        assert "Check-ins are off." in await h.command(OWNER, "/checkin off", "Check-ins are off")
        assert next(r for r in rows(h, Schedule) if r["kind"] == "checkin")["status"] == "cancelled"
        tg.push_text(OWNER, "/checkin daily 09:00", chat_id=group)
        await tg.wait_for(lambda: tg.sent_texts(group), what="the group's answer")
        assert tg.sent_texts(group)[-1].startswith("Check-ins are private")
        assert not [r for r in rows(h, Schedule) if r["kind"] == "checkin" and r["status"] == "active"]


async def test_a_digest_is_one_capped_llm_request_shown_with_its_price(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, llm_prices='{"fake-model": [1.0, 2.0]}') as h:
        await goal(h, "Finish the bathroom tiles", expires_in=timedelta(days=2))
        reply = await h.command(OWNER, "/checkin daily 07:30 digest", "Check-in set")
        assert "forecast at about $" in reply
        llm.script(text("Your bathroom tiles goal expires in two days."))
        firing = await fire_next(h)
        assert firing["status"] == "sent"
        assert len(llm.requests) == 1
        request = llm.requests[0]
        assert "Finish the bathroom tiles" in request["messages"][-1]["content"]
        (msg,) = checkin_messages(tg, OWNER)
        assert "Your bathroom tiles goal expires in two days." in msg["text"]
        assert labels(msg) == ["Still on", "Done", "Drop"]
        from db.models import LLMCall

        calls = rows(h, LLMCall)
        assert [c["purpose"] for c in calls] == ["checkin"]


async def test_a_cap_near_its_limit_a_reminder_today_and_a_paused_task_are_listed(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    from db.usage import LLMCallRecord

    prices = '{"fake-model": [1.0, 1.0]}'  # 1M tokens cost $1
    async with running_bot(tmp_path, tg, llm, llm_prices=prices, budget_daily_usd=1.0) as h:
        h.services.usage.record_llm_call(
            LLMCallRecord(
                user_id=OWNER,
                session_id=None,
                purpose="chat",
                model="fake-model",
                prompt_tokens=450_000,
                completion_tokens=450_000,
            )
        )
        await h.command(OWNER, "/checkin daily 00:05", "Check-in set")
        at = checkin_schedule(h)["next_fire_at"]
        service = h.services.schedules.service
        real = service.clock
        service.clock = lambda: at - timedelta(minutes=1)  # "now", for making the reminder and the task
        parcel = service.create(
            user_id=OWNER,
            chat_id=OWNER,
            chat_type="private",
            text="Pick up the parcel",
            at=f"{at:%Y-%m-%d}T18:00",
        )
        pills = service.create(
            user_id=OWNER,
            chat_id=OWNER,
            chat_type="private",
            text="Take the pills",
            at=f"{at:%Y-%m-%d}T19:00",
            repeat="FREQ=DAILY",
        )
        task = service.create(
            user_id=OWNER,
            chat_id=OWNER,
            chat_type="private",
            text="Summarise the news",
            kind="task",
            at=f"{at:%Y-%m-%d}T20:00",
            repeat="FREQ=DAILY",
        )
        service.pause(OWNER, task["id"])
        service.clock = real
        # The spend is today's (UTC) for the cap: look while it is still today.
        h.services.usage_service.clock = lambda: datetime.now(UTC)
        firing = await fire_next(h)
        assert firing["status"] == "sent"
        (msg,) = checkin_messages(tg, OWNER)
        assert "Reminder: Pick up the parcel (today at 18:00)" in msg["text"]
        assert "Task: Summarise the news (paused" in msg["text"]
        assert "Cap: your daily cost cap (90 % used)" in msg["text"]
        assert f"sch:resume:{task['id']}" in data_of(msg)
        assert f"ci:snz:{parcel['id']}" in data_of(msg) and f"ci:snz:{pills['id']}" in data_of(msg)
        assert len(llm.requests) == 0
        # Snooze: the one-time reminder moves an hour; the repeating one's 19:00 comes at 20:00 as a
        # snoozed firing, and it goes on from tomorrow's 19:00.
        assert "Snoozed: it comes at 19:00" in await press(h, f"ci:snz:{parcel['id']}", msg["message_id"])
        assert "Snoozed: it comes at 20:00" in await press(h, f"ci:snz:{pills['id']}", msg["message_id"])
        by_id = {r["id"]: r for r in rows(h, Schedule)}
        day = at.replace(hour=0, minute=0, second=0, microsecond=0)
        assert by_id[parcel["id"]]["next_fire_at"] == day + timedelta(hours=19)
        assert by_id[pills["id"]]["next_fire_at"] == day + timedelta(days=1, hours=19)
        (snoozed,) = [f for f in firings(h, pills["id"]) if f["snoozed"]]
        assert snoozed["not_before"] == day + timedelta(hours=20) and snoozed["status"] == "due"
        await tg.wait_for(lambda: "💤 snoozed" in checkin_messages(tg, OWNER)[0]["text"], what="the mark")


async def test_a_digest_over_the_cap_makes_no_request_and_the_template_goes_out(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    from db.usage import LLMCallRecord

    prices = '{"fake-model": [1.0, 1.0]}'
    async with running_bot(tmp_path, tg, llm, llm_prices=prices, budget_daily_usd=0.5) as h:
        h.services.usage.record_llm_call(
            LLMCallRecord(
                user_id=OWNER,
                session_id=None,
                purpose="chat",
                model="fake-model",
                prompt_tokens=300_000,
                completion_tokens=300_000,
            )
        )
        await goal(h, "Book the flights", expires_in=timedelta(days=1))
        await h.command(OWNER, "/checkin daily 08:00 digest", "Check-in set")
        assert (await fire_next(h))["status"] == "sent"
        assert llm.requests == []  # refused before anything was sent
        (msg,) = checkin_messages(tg, OWNER)
        assert (
            "Goal: Book the flights" in msg["text"]
            and "No digest this time: Usage cap reached" in msg["text"]
        )
        assert labels(msg) == ["Still on", "Done", "Drop"]
