"""The watchdog in a running bot (issue 33 item 1), against the fake Bot API: an answer whose sends keep
failing is noticed, recorded and in the health file, delivered once when sends work again and the owner
told; a firing a killed process left in `sending` is noticed and sent again; doctor counts both."""

from __future__ import annotations

import logging
import os
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.adapter.vigil import webhook_condition
from bot.process.vigil_checks import check_watchdog
from bot.runtime.vigil.probes import POLLING, SENDING, UNDELIVERED, WEBHOOK
from db.watchdog_events import WatchdogEvents
from tests.support.databases import both_databases, sqlite_only
from tests.support.fakes.openai_api import FakeLLM, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, TOKEN, Harness, running_bot
from tests.support.processes import bot_process, full_env, run_bot
from tests.support.schedules import local_at, wait_sent

db_kind = both_databases()  # the events are recorded in the bot's database, which doctor reads
pytestmark = [pytest.mark.usefixtures("bot_database"), pytest.mark.slow]  # real bots wait out thresholds

FAST: dict[str, Any] = {
    "watchdog_tick_s": 0.2
}  # the thresholds are the tests' own; no sleep decides anything


def events(h: Harness, condition: str) -> list[object]:
    return [e for e in WatchdogEvents(h.services.engine).recent() if e.condition == condition]


async def test_an_answer_whose_sends_keep_failing_is_noticed_then_delivered_once_and_the_owner_told(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="bot.runtime.vigil")
    llm.default = text("reply 42")
    health = tmp_path / "bot-health"
    async with running_bot(
        tmp_path, tg, llm, watchdog_undelivered_s=1.0, health_file=str(health), **FAST
    ) as h:
        assert h.vigil is not None
        await h.command(OWNER, "/start", "Hello")
        tg.fail_when("sendMessage", lambda p: True, error="bad_gateway")  # every send: 502, until cleared
        tg.push_text(OWNER, "hello?")
        tracker = h.vigil.tracker(UNDELIVERED)
        await tg.wait_for(lambda: tracker.active, what="the condition's onset")
        await tg.wait_for(
            lambda: health.read_text().startswith("unhealthy: answers undelivered since "),
            what="the health file unhealthy",
        )
        assert "Bad Gateway" in health.read_text()
        ongoing = check_watchdog(h.settings)  # doctor, as another process would run it
        assert not ongoing.ok and ongoing.detail.startswith("answers undelivered since "), ongoing
        assert "reply 42" not in tg.sent_texts(OWNER)
        tg.clear_faults()
        await h.final_text(OWNER, "reply 42")
        notice = await h.final_text(OWNER, "I could not send answers from")
        assert notice.endswith("1 answer(s) that waited meanwhile are delivered now."), notice
        await tg.wait_for(lambda: health.read_text().startswith("ok"), what="the health file ok again")
        assert tg.sent_texts(OWNER).count("reply 42") == 1
        assert len([t for t in tg.sent_texts(OWNER) if "I could not send answers" in t]) == 1
        (event,) = events(h, UNDELIVERED)
        assert event.ended is not None and "Bad Gateway" in event.cause  # type: ignore[attr-defined]
        done = check_watchdog(h.settings)
        assert done.ok and "1 event(s) in 7 days, last: answers undelivered" in done.detail, done
    onsets = [
        r.getMessage() for r in caplog.records if "watchdog: answers undelivered since" in r.getMessage()
    ]
    assert len(onsets) == 1 and TOKEN not in onsets[0]
    assert health.read_text().startswith("unhealthy: the bot stopped")


async def test_a_firing_left_in_sending_by_a_killed_process_is_noticed_and_sent_again(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, watchdog_sending_s=0.5, **FAST) as h:
        assert h.vigil is not None
        await tg.wait_for(lambda: h.services.replica.holding("reminders"), what="the reminders' lease")
        service = h.services.schedules.service
        made = service.create(
            user_id=OWNER, chat_id=OWNER, chat_type="private", text="Water the plants", at=local_at(3600)
        )
        real = service.clock
        service.clock = lambda: real() + timedelta(hours=2)
        (fid,) = service.fire_due()
        # Another process marked it `sending` and was killed before it recorded the outcome.
        service.mark_sending([fid])
        service.clock = real
        resent = await h.final_text(OWNER, "Water the plants")
        assert "I was restarted while sending this" in resent
        notice = await h.final_text(OWNER, "Reminders were stuck in sending from")
        assert "sent again now, marked as a possible copy" in notice
        (firing,) = await wait_sent(h, int(made["id"]))
        assert firing.status == "sent" and firing.resend
        assert len([t for t in tg.sent_texts(OWNER) if "Water the plants" in t]) == 1
        (event,) = events(h, SENDING)
        assert event.ended is not None and f"#{fid}" in event.cause  # type: ignore[attr-defined]
        check = check_watchdog(h.settings)
        assert check.ok and "last: firings stuck in sending" in check.detail, check


async def test_an_idle_bot_raises_no_alarm(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    health = tmp_path / "bot-health"
    async with running_bot(
        tmp_path,
        tg,
        llm,
        watchdog_undelivered_s=0.5,
        watchdog_sending_s=0.5,
        health_file=str(health),
        **FAST,
    ) as h:
        assert h.vigil is not None
        ticks = h.vigil.ticks
        await tg.wait_for(lambda: h.vigil is not None and h.vigil.ticks >= ticks + 15, what="15 ticks")
        assert health.read_text().splitlines()[0] == "ok"
        assert WatchdogEvents(h.services.engine).count() == 0
        assert h.vigil.told == 0


async def test_a_poll_stall_is_recorded_and_in_the_health_file(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    health = tmp_path / "bot-health"
    async with running_bot(
        tmp_path,
        tg,
        llm,
        watchdog_poll_stall_s=1.0,
        watchdog_poll_restarts=50,
        health_file=str(health),
        **FAST,
    ) as h:
        assert h.vigil is not None and h.watchdog is not None
        await h.command(OWNER, "/start", "Hello")
        tg.hold_updates("fail")
        await tg.wait_for(lambda: h.vigil is not None and h.vigil.tracker(POLLING).active, what="the stall")
        await tg.wait_for(
            lambda: health.read_text().startswith("unhealthy: polling stalled since "), what="unhealthy"
        )
        assert "HTTP 502" in health.read_text()
        tg.release_updates()
        await h.final_text(OWNER, "I could not receive messages from")  # the poll's watchdog tells
        await tg.wait_for(lambda: health.read_text().startswith("ok"), what="the health file ok again")
        (event,) = events(h, POLLING)
        assert event.ended is not None and "HTTP 502" in event.cause  # type: ignore[attr-defined]
        assert h.vigil.told == 0  # the owner was told once, by the poll's watchdog
        assert len([t for t in tg.sent_texts(OWNER) if "I could not receive messages" in t]) == 1


async def test_updates_waiting_at_telegram_while_none_arrives_are_noticed_with_telegrams_error(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.default = text("reply 7")
    async with running_bot(tmp_path, tg, llm, **FAST) as h:
        assert h.vigil is not None
        # getWebhookInfo as a webhook-mode process asks it (here the updates wait because getUpdates hangs).
        h.vigil.add(webhook_condition(h.app, every_s=0.0, after_s=1.0))
        await h.command(OWNER, "/start", "Hello")
        tg.hold_updates("hang")
        tg.webhook_error = (int(time.time()), "Connection refused")
        tg.push_text(OWNER, "are you there?")
        tracker = h.vigil.tracker(WEBHOOK)
        await tg.wait_for(lambda: tracker.active, what="the webhook condition")
        assert "1 update(s) wait at Telegram" in tracker.cause and "Connection refused" in tracker.cause
        tg.webhook_error = None
        tg.release_updates()
        await h.final_text(OWNER, "reply 7")
        notice = await h.final_text(OWNER, "Watchdog: webhook not delivering from")
        assert notice.endswith("it is over now.")
        (event,) = events(h, WEBHOOK)
        assert event.ended is not None  # type: ignore[attr-defined]


@sqlite_only  # the process's own database; the health file is the same on both
async def test_the_quick_doctor_reads_a_running_processs_health_file_and_fails_once_it_is_stuck_or_gone(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    health = tmp_path / "bot-health"
    env = full_env(tmp_path, tg, llm, HEALTH_FILE=str(health), WATCHDOG_TICK_S="0.5")
    async with bot_process(tmp_path, env) as proc:
        await tg.wait_for(lambda: health.exists(), timeout=120, what="the health file")
        code, out, _err = await run_bot(tmp_path, "doctor", "--quick", env=env)
        assert code == 0 and "ok   process: healthy (written " in out, out + proc.tail()
        os.kill(proc.pid, signal.SIGSTOP)  # a stuck event loop: the file is not rewritten any more
        try:
            old = time.time() - 60  # as the file of a loop stuck for a minute (no waiting it out)
            os.utime(health, (old, old))
            code, out, _err = await run_bot(tmp_path, "doctor", "--quick", env=env)
        finally:
            os.kill(proc.pid, signal.SIGCONT)
        assert code == 1 and "FAIL process: the health file was last written" in out, out
        assert await proc.stop() == 0, proc.tail()
    code, out, _err = await run_bot(tmp_path, "doctor", "--quick", env=env)
    assert code == 1 and "FAIL process: unhealthy: the bot stopped" in out, out
