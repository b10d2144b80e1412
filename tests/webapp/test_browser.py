"""The app's page in a real browser (chromium), opened the way a Telegram client opens it: a URL fragment with
launch data signed here. What a person would see is asserted: their memories, an edit that /memory shows,
a clear refusal of forged or expired data, nobody else's data, markup shown as text, the dark theme."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from bot.webapp.link import DARK_THEME, signed_link
from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, TOKEN, running_bot
from tests.webapp.client import DAY

pytestmark = pytest.mark.slow  # a real browser; the API tests (test_api.py) run on both databases

XSS = '<img src=x onerror="window.__xss = 1; alert(1)">'
PHONE = {"width": 360, "height": 740}


class Page:
    """A browser page that records dialogs and errors (a script injected by data would show there)."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.dialogs: list[str] = []
        self.errors: list[str] = []
        self._tasks: set[asyncio.Future[None]] = set()
        page.on("dialog", self._dialog)
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        page.on("console", self._console)

    def _console(self, msg: Any) -> None:
        if msg.type == "error":
            self.errors.append(msg.text)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(dialog.message)
        task = asyncio.ensure_future(dialog.dismiss())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def open(self, url: str) -> str:
        """Open the page and wait until it shows its first data (or its refusal); the body's text."""
        await self.page.goto(url)
        await self.page.wait_for_selector("body[data-ready]", timeout=60_000)
        text: str = await self.page.inner_text("body")
        return text


def link(base: str, user: int, *, dark: bool = False, age_s: int = 0, token: str = TOKEN) -> str:
    import time

    return signed_link(
        base, token, {"id": user, "first_name": f"User{user}"}, dark=dark, auth_date=int(time.time()) - age_s
    )


async def test_the_page_shows_the_users_memories_saves_an_edit_and_runs_no_injected_script(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, browser: Any
) -> None:
    async with running_bot(tmp_path, tg, llm, webapp_listen="127.0.0.1:0") as h:
        memory = h.services.memory
        await memory.store(OWNER, "long", "User likes cycling along the river", dedupe=False)
        await memory.store(OWNER, "long", XSS, dedupe=False, origin="tool", untrusted=True)
        await memory.store(OWNER, "mid", "Plans a trip to Porto in June", dedupe=False, origin="extraction")
        await memory.store(FRIEND, "long", "Friend's diary: secret recipe", dedupe=False)
        # A forwarded message's words, stored as said by their author.
        await memory.store(OWNER, "long", "The rehearsal moved to Thursday", dedupe=False, speaker="Anna")

        page = Page(await browser.new_page(viewport=PHONE))
        text = await page.open(link(h.app_url, OWNER))
        assert "User likes cycling along the river" in text and "Plans a trip to Porto in June" in text
        assert "secret recipe" not in text
        # The markup is shown as the characters it is, and nothing of it ran.
        cards = page.page.locator("#memories li.card")
        contents = await page.page.locator("#memories .content").all_inner_texts()
        assert XSS in contents
        assert await page.page.locator("#memories img").count() == 0
        assert await page.page.evaluate("window.__xss") is None
        assert "⚠ untrusted" in await cards.filter(has_text="onerror").inner_text()
        assert "remembered from our chat" in await cards.filter(has_text="Porto").inner_text()
        assert "said by Anna" in await cards.filter(has_text="rehearsal").inner_text()
        assert "said by" not in await cards.filter(has_text="cycling").inner_text()

        # Edit in the page; the chat's /memory shows the new text.
        memory_id = await cards.filter(has_text="cycling").get_attribute("data-id")
        card = page.page.locator(f'#memories li[data-id="{memory_id}"]')  # its text turns into a text box
        await card.get_by_role("button", name="Edit").click()
        await card.locator("textarea").fill("User likes cycling and swimming")
        await card.get_by_role("button", name="Save").click()
        await page.page.locator("#memories .content", has_text="cycling and swimming").wait_for()
        listing = await h.command(OWNER, "/memory", "Long-term:")
        assert "User likes cycling and swimming" in listing and "along the river" not in listing
        assert "The rehearsal moved to Thursday [fact, said by Anna," in listing

        # Layers and search narrow the list.
        from playwright.async_api import expect

        await page.page.click("button[data-layer=mid]")
        # The Porto card was on the page before the click too: wait until the list is the mid layer's alone.
        await expect(page.page.locator("#memories .content")).to_have_count(1, timeout=60_000)
        await expect(page.page.locator("#memories .content")).to_have_text(["Plans a trip to Porto in June"])

        # It fits a phone: nothing wider than 360 px.
        assert await page.page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        shot = tmp_path / "app-360.png"
        await page.page.screenshot(path=str(shot), full_page=True)
        assert shot.stat().st_size > 0
        assert page.dialogs == [] and page.errors == []


async def test_forged_expired_or_missing_launch_data_is_refused_and_the_dark_theme_is_followed(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, browser: Any
) -> None:
    async with running_bot(tmp_path, tg, llm, webapp_listen="127.0.0.1:0") as h:
        await h.services.memory.store(OWNER, "long", "Owner's bank is Nordbank", dedupe=False)
        await h.services.memory.store(FRIEND, "long", "Friend plays the cello", dedupe=False)
        base = h.app_url
        refusals = {
            "not signed by Telegram": link(base, OWNER, token="999:SOMEONE-ELSES-TOKEN"),
            "has expired": link(base, OWNER, age_s=DAY + 120),
            "No Telegram launch data": base,
        }
        for message, url in refusals.items():
            page = Page(await browser.new_page(viewport=PHONE))
            text = await page.open(url)
            assert message in text, (message, text)
            assert await page.page.locator("#fatal").is_visible()
            assert "Nordbank" not in text and "cello" not in text
            await page.page.close()

        page = Page(await browser.new_page(viewport=PHONE))
        text = await page.open(link(base, FRIEND, dark=True))
        assert "Friend plays the cello" in text and "Nordbank" not in text
        assert await page.page.evaluate("document.documentElement.dataset.scheme") == "dark"
        background = await page.page.evaluate("getComputedStyle(document.body).backgroundColor")
        r, g, b = (int(DARK_THEME["bg_color"][i : i + 2], 16) for i in (1, 3, 5))
        assert background == f"rgb({r}, {g}, {b})"
        await page.page.screenshot(path=str(tmp_path / "app-360-dark.png"), full_page=True)
        assert page.dialogs == [] and page.errors == []
