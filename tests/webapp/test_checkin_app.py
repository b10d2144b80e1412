"""The check-in in the app, read in a real browser (chromium): its schedule in the user's zone, what the
last one contained (with the presses' marks), and turning it on and off from the page."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import update

from db.models import Memory
from tests.bot.test_checkins import checkin_messages, checkin_schedule, fire_next, press
from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, running_bot
from tests.webapp.test_app_display import _open

pytestmark = pytest.mark.slow  # a real browser and the bot


async def test_the_app_shows_the_check_in_schedule_and_the_last_one_and_sets_it(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, browser: Any
) -> None:
    async with running_bot(tmp_path, tg, llm, webapp_listen="127.0.0.1:0") as h:
        stored = await h.services.memory.store(OWNER, "mid", "Paint the fence", category="goal", dedupe=False)
        mid = str(stored["memory"]["id"])
        await h.command(OWNER, "/timezone Europe/Berlin", "Europe/Berlin")
        await h.command(OWNER, "/checkin weekly fri 18:30", "Check-in set")
        with h.services.engine.begin() as conn:  # near its end at the firing, whatever today's weekday
            soon = checkin_schedule(h)["next_fire_at"] + timedelta(days=2)
            conn.execute(update(Memory).where(Memory.public_id == mid).values(expires_at=soon))
        assert (await fire_next(h))["status"] == "sent"
        (msg,) = checkin_messages(tg, OWNER)
        await press(h, f"ci:still:{mid}", msg["message_id"])

        page = await _open(h, browser, "schedules")
        card = page.page.locator("#checkin")
        await card.locator("#checkin-last").wait_for()
        text = await card.inner_text()
        assert "weekly on Fri at 18:30 (Europe/Berlin)" in text
        assert "Next look: Fri" in text and "18:30" in text
        assert "Goal: Paint the fence" in text and "still on" in text

        # Set from the page: daily at 07:15; then off.
        await card.locator("select[name=cadence]").select_option("daily")
        await card.locator("input[name=at]").fill("07:15")
        await card.get_by_role("button", name="Save").click()
        await card.get_by_text("daily at 07:15").wait_for()
        assert "daily at 07:15 (Europe/Berlin)" in await h.command(OWNER, "/checkin", "Check-in:")
        await card.get_by_role("button", name="Turn off").click()
        await card.get_by_text("Off. When on").wait_for()
        assert "Check-ins are off" in await h.command(OWNER, "/checkin", "Check-ins are off")
        assert page.errors == [] and page.dialogs == []
