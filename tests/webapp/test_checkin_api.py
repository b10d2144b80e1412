"""The app's check-in API: set as /checkin sets it (bad input refused with the same usage line), and each
user sees only their own check-in and what it contained."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import update

from db.models import Memory
from tests.bot.test_checkins import fire_next
from tests.support.databases import both_databases
from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, running_bot
from tests.webapp.client import AppClient, init_data

db_kind = both_databases()
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("bot_database")]  # bot processes


async def test_set_check_bad_input_and_nobody_elses_check_in(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, webapp_listen="127.0.0.1:0") as h:
        stored = await h.services.memory.store(
            OWNER, "mid", "Owner's secret goal", category="goal", dedupe=False
        )
        with h.services.engine.begin() as conn:
            conn.execute(
                update(Memory)
                .where(Memory.public_id == stored["memory"]["id"])
                .values(expires_at=datetime.now(UTC) + timedelta(days=1))
            )
        async with AppClient(h.app_url, init_data(OWNER)) as client:
            for bad in (
                {"cadence": "hourly"},
                {"cadence": "daily", "at": "9 o'clock"},
                {"cadence": "weekly", "weekday": "someday", "at": "10:00"},
                {"cadence": ["daily"]},
            ):
                status, body = await client.call("POST", "/api/checkin", bad)
                assert status == 400 and "Usage: /checkin" in body["error"], (bad, status, body)
            state = (await client.ok("POST", "/api/checkin", {"cadence": "daily", "at": "06:45"}))["checkin"]
            assert state["enabled"] and state["description"] == "daily at 06:45 (UTC)" and state["next"]
        assert (await fire_next(h))["status"] == "sent"
        async with AppClient(h.app_url, init_data(OWNER)) as client:
            state = (await client.ok("GET", "/api/checkin"))["checkin"]
            assert [i["text"] for i in state["last_items"]] == ["Owner's secret goal"]
        async with AppClient(h.app_url, init_data(FRIEND)) as client:
            state = (await client.ok("GET", "/api/checkin"))["checkin"]
            assert state == {"enabled": False, "timezone": "UTC"}
            assert "secret" not in str(state)
