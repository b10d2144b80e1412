"""The long poll's watchdog (issue 33 item 1): getUpdates that hang or fail while the rest of the Bot API
answers restart the poller, the messages that arrived meanwhile are answered once each, and the owner is told
once polling works again. The decisions on an injected clock; the healing through the real application
polling the fake Bot API."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from bot.adapter.watchdog import EXIT_POLL_STALLED, Action, PollHealth, missed_notice
from tests.support.fakes.openai_api import FakeLLM, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, TOKEN, running_bot
from tests.support.processes import bot_process, full_env

NOTICE = "I could not receive messages from"


def test_an_idle_bot_that_polls_is_never_stalled() -> None:
    health = PollHealth(stall_s=90, max_restarts=3)
    # Long polls with no update complete every ~10 s: no alarm, ever.
    for t in range(0, 3600, 10):
        assert health.observe(now=t + 9.9, last_ok=t) is Action.NONE


def test_a_stall_restarts_then_gives_up_and_a_success_recovers() -> None:
    health = PollHealth(stall_s=90, max_restarts=2)
    assert health.observe(now=89, last_ok=0) is Action.NONE
    assert health.observe(now=90, last_ok=0) is Action.RESTART
    assert health.restarts == 1 and health.stalled_since == 0
    # After a restart, another full threshold without progress before the next one.
    assert health.observe(now=179, last_ok=0) is Action.NONE
    assert health.observe(now=180, last_ok=0) is Action.RESTART
    assert health.observe(now=269, last_ok=0) is Action.NONE
    assert health.observe(now=270, last_ok=0) is Action.GIVE_UP
    # A getUpdates that succeeded after the stall began: recovered, and the next stall is a new one.
    health = PollHealth(stall_s=90, max_restarts=2)
    assert health.observe(now=95, last_ok=1) is Action.RESTART
    assert health.observe(now=100, last_ok=99) is Action.RECOVERED
    assert health.recovered_at == 99
    health.reset()
    assert health.observe(now=150, last_ok=140) is Action.NONE
    assert health.observe(now=240, last_ok=140) is Action.RESTART and health.restarts == 1


def test_no_restart_allowed_gives_up_at_the_first_stall() -> None:
    health = PollHealth(stall_s=5, max_restarts=0)
    assert health.observe(now=5, last_ok=0) is Action.GIVE_UP


def test_the_notice_says_from_when_to_when_and_how_many() -> None:
    line = missed_notice(0.0, 420.0, 3)
    assert line.startswith(NOTICE) and line.endswith("3 message(s) that arrived meanwhile are answered now.")
    assert "no message arrived meanwhile" in missed_notice(0.0, 60.0, 0)


@pytest.mark.slow  # a real bot waits out a small stall threshold
@pytest.mark.parametrize("hold", ["hang", "fail"])
async def test_polling_that_makes_no_progress_is_restarted_and_the_owner_told(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, caplog: pytest.LogCaptureFixture, hold: str
) -> None:
    caplog.set_level(logging.INFO, logger="bot.adapter.watchdog")
    llm.default = text("the answer")
    # The harness polls with a 1 s timeout: a threshold of 1 s is raised to 2 s (no false alarm).
    async with running_bot(tmp_path, tg, llm, watchdog_poll_stall_s=1.0, watchdog_poll_restarts=50) as h:
        assert h.watchdog is not None and h.watchdog.health.stall_s == 2.0
        await h.command(OWNER, "/start", "Hello")  # polling works
        tg.hold_updates(hold)
        held = tg.held_polls
        await tg.wait_for(lambda: tg.held_polls > held, what="a getUpdates held")
        tg.push_text(OWNER, "one")
        tg.push_text(FRIEND, "two")
        await tg.wait_for(
            lambda: h.watchdog is not None and h.watchdog.health.restarts >= 1, what="a restart"
        )
        # The Bot API's other methods answer meanwhile; the messages wait.
        assert not [t for t in tg.sent_texts(FRIEND) if "the answer" in t]
        tg.release_updates()
        notice = await h.final_text(OWNER, NOTICE)
        assert notice.endswith("2 message(s) that arrived meanwhile are answered now.")
        await h.final_text(OWNER, "the answer")
        await h.final_text(FRIEND, "the answer")
        assert len(tg.sent_texts(OWNER)) == 3 and len(tg.sent_texts(FRIEND)) == 1  # /start, notice, answer
        assert len([t for t in tg.sent_texts(OWNER) if NOTICE in t]) == 1
        stalls = [r for r in caplog.records if "polling makes no progress" in r.getMessage()]
        assert len(stalls) == 1, [r.getMessage() for r in stalls]
        assert "123456:" not in stalls[0].getMessage()  # no token in the line


@pytest.mark.slow  # a real bot waits out a few small stall thresholds
async def test_a_bot_api_out_of_reach_keeps_the_process_and_heals_when_it_is_back(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    """When getMe fails too (the network or Telegram is down), a new process would find the same and could
    not even start: the watchdog does not give up, keeps restarting the poller (whose own start fails), and
    heals once the Bot API is back."""
    caplog.set_level(logging.INFO, logger="bot.adapter.watchdog")
    llm.default = text("the answer")
    async with running_bot(tmp_path, tg, llm, watchdog_poll_stall_s=1.0, watchdog_poll_restarts=1) as h:
        await h.command(OWNER, "/start", "Hello")
        tg.hold_updates("fail")
        for method in ("getMe", "deleteWebhook"):  # the restarted poller's start calls deleteWebhook
            tg.fail_when(method, lambda _params: True, "bad_gateway")
        held = tg.held_polls
        await tg.wait_for(lambda: tg.held_polls > held, what="a getUpdates held")
        tg.push_text(OWNER, "are you there?")

        def staying() -> bool:
            return any("does not answer getMe either" in r.getMessage() for r in caplog.records)

        await tg.wait_for(staying, timeout=60, what="the watchdog staying up")
        assert h.watchdog is not None and not h.watchdog.gave_up and h.app.running
        assert any("could not restart the poller" in r.getMessage() for r in caplog.records)
        tg.clear_faults()
        tg.release_updates()
        notice = await h.final_text(OWNER, NOTICE)
        assert notice.endswith("1 message(s) that arrived meanwhile are answered now."), notice
        await h.final_text(OWNER, "the answer")
        assert not h.watchdog.gave_up


@pytest.mark.slow  # a real `python -m bot` process waits out two stall thresholds (11 s each)
async def test_a_poll_that_restarts_do_not_heal_ends_the_process_with_exit_code_3(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    tg.hold_updates("fail")  # a proxy in front of the Bot API answers every getUpdates with 502
    env = full_env(tmp_path, tg, llm, WATCHDOG_POLL_STALL_S="1", WATCHDOG_POLL_RESTARTS="1")
    async with bot_process(tmp_path, env) as proc:
        # The threshold is raised to the long poll's 10 s + 1 s: one restart, then the process gives up.
        code = await asyncio.wait_for(proc.wait(), timeout=180)
        log = proc.log()
    assert code == EXIT_POLL_STALLED, proc.tail()
    assert log.count("polling makes no progress") == 1, proc.tail()
    assert "HTTP 502" in log and log.count("polling still makes no progress after 1 restart(s)") == 1, (
        proc.tail()
    )
    assert TOKEN not in log
    assert tg.calls_to("getMe")  # the rest of the Bot API answered
