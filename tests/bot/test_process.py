"""The real `python -m bot` process: start-up errors, kill -9 mid-turn, and the terminal chat."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest

from tests.support.fakes.openai_api import FakeLLM, hang, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, TOKEN, running_bot
from tests.support.processes import bot_env, bot_process, fake_env, free_port, run_bot, start_bot

pytestmark = pytest.mark.slow  # real `python -m bot` processes


async def test_missing_settings_stop_start_up_with_one_line_each(tmp_path: Path) -> None:
    code, out, err = await run_bot(tmp_path, env=bot_env(tmp_path))
    assert code == 2
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert lines == [line for line in lines if line.startswith("Configuration error: ")] and any(
        "OPENAI_API_KEY is missing" in line for line in lines
    )

    code, _, err = await run_bot(tmp_path, env=bot_env(tmp_path, OPENAI_API_KEY="sk-x"))
    assert code == 2 and "TELEGRAM_BOT_TOKEN is missing" in err and "ALLOWED_USER_IDS is missing" in err

    bad = bot_env(tmp_path, OPENAI_API_KEY="sk-x", TELEGRAM_BOT_TOKEN="nonsense", ALLOWED_USER_IDS="12,ann")
    code, _, err = await run_bot(tmp_path, env=bad)
    assert code == 2 and "Traceback" not in err
    assert "TELEGRAM_BOT_TOKEN is invalid" in err and "'ann' is not a numeric Telegram user id" in err
    assert "nonsense" not in err  # a value that may be a secret is never echoed


async def test_kill_9_mid_turn_then_restart_tells_the_user(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(hang(60))
    env = fake_env(tmp_path, tg, llm, f"sqlite:///{tmp_path / 'data' / 'assistant.db'}")
    async with bot_process(tmp_path, env) as proc:
        # A cold start on a busy machine, then a first long poll that waits for updates.
        await tg.wait_for_call("getUpdates", timeout=120)
        tg.push_text(OWNER, "Plan my trip to Lisbon")
        await llm.wait_for_requests(1, timeout=120)
        await proc.kill()
    llm.script(text("Sure, let us plan Lisbon."))
    async with running_bot(tmp_path, tg, llm) as h:
        notice = await h.final_text(OWNER, "I was restarted")
        assert "Plan my trip to Lisbon" in notice
        tg.push_text(OWNER, "Please continue")
        await h.final_text(OWNER, "Sure, let us plan Lisbon.")
        users = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "user"]
        assert users == ["Plan my trip to Lisbon", "Please continue"]


async def test_terminal_chat(tmp_path: Path, llm: FakeLLM) -> None:
    llm.script(text("Hello from the **terminal**."))
    env = bot_env(
        tmp_path,
        OPENAI_API_KEY="sk-test",
        OPENAI_BASE_URL=llm.base_url,
        DATABASE_URL=f"sqlite:///{tmp_path / 'chat.db'}",
    )
    code, out, err = await run_bot(tmp_path, "chat", env=env, stdin=b"hi there\n/quit\n")
    assert code == 0, err
    assert "Hello from the **terminal**." in out
    assert llm.requests[0]["messages"][-1] == {"role": "user", "content": "hi there"}


SECRET_HALF = TOKEN.split(":", 1)[1]


def assert_no_token(text: str) -> None:
    """Neither the bot token nor its secret half appears anywhere."""
    assert TOKEN not in text and SECRET_HALF not in text, text


async def test_refused_token_is_one_line_without_the_token(tmp_path: Path) -> None:
    async with FakeTelegram(token="999:ANOTHER-BOT") as tg:  # answers 401 to our token
        env = bot_env(
            tmp_path,
            TELEGRAM_BOT_TOKEN=TOKEN,
            TELEGRAM_API_BASE_URL=tg.base_url,
            ALLOWED_USER_IDS=str(OWNER),
            OPENAI_API_KEY="sk-test",
            DATABASE_URL=f"sqlite:///{tmp_path / 'a.db'}",
            LOG_LEVEL="DEBUG",
        )
        code, out, err = await run_bot(tmp_path, env=env)
        assert [c.status for c in tg.calls_to("getMe")] == [401]
    assert code == 1
    assert_no_token(out + err)
    assert "Traceback" not in out + err
    assert err.strip().splitlines() == [
        "Start-up failed: Telegram refused the bot token (401 Unauthorized): check TELEGRAM_BOT_TOKEN."
    ]


async def test_wrong_base_url_is_one_line_without_the_token(tmp_path: Path, tg: FakeTelegram) -> None:
    base = tg.base_url.replace("/bot", "/wrong/bot")  # the fake answers 404, as api.telegram.org does
    env = bot_env(
        tmp_path,
        TELEGRAM_BOT_TOKEN=TOKEN,
        TELEGRAM_API_BASE_URL=base,
        ALLOWED_USER_IDS=str(OWNER),
        OPENAI_API_KEY="sk-test",
        DATABASE_URL=f"sqlite:///{tmp_path / 'a.db'}",
        LOG_LEVEL="DEBUG",
    )
    code, out, err = await run_bot(tmp_path, env=env)
    assert code == 1
    assert_no_token(out + err)
    assert "Traceback" not in out + err
    assert err.strip().splitlines() == [
        f"Start-up failed: the Bot API answered 404 Not Found: check TELEGRAM_API_BASE_URL (now {base}) "
        "and TELEGRAM_BOT_TOKEN."
    ]


async def test_debug_webhook_run_logs_neither_token_nor_secrets(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    secret = "whsec-0123456789abcdef"
    env = bot_env(
        tmp_path,
        TELEGRAM_BOT_TOKEN=TOKEN,
        TELEGRAM_API_BASE_URL=tg.base_url,
        TELEGRAM_WEBHOOK_URL="https://bot.example.com/tg-hook",
        TELEGRAM_WEBHOOK_SECRET=secret,
        TELEGRAM_WEBHOOK_LISTEN="127.0.0.1",
        TELEGRAM_WEBHOOK_PORT=str(free_port()),
        ALLOWED_USER_IDS=str(OWNER),
        OPENAI_API_KEY="sk-openai-key-0123456789",
        OPENAI_BASE_URL=llm.base_url,
        BRAVE_API_KEY="brave-key-0123456789",
        DATABASE_URL=f"sqlite:///{tmp_path / 'a.db'}",
        LOG_LEVEL="DEBUG",
    )
    proc = await start_bot(tmp_path, env=env)
    try:
        calls = await tg.wait_for_call("setWebhook", timeout=120)  # a cold start on a busy machine
        assert calls[0].params["secret_token"] == secret  # it was really sent
        await tg.wait_for_call("setMyCommands", timeout=120)
    finally:
        proc.send_signal(signal.SIGTERM)
        out_b, err_b = await asyncio.wait_for(proc.communicate(), 120)
    out, err = out_b.decode(), err_b.decode()
    logged = out + err
    assert "Calling Bot API endpoint `setWebhook`" in logged  # the DEBUG line that carried the secret
    assert_no_token(logged)
    for value in (secret, "sk-openai-key-0123456789", "brave-key-0123456789"):
        assert value not in logged
    assert "'secret_token': '***'" in logged
