"""What the app's page shows, read in a real browser (chromium) as a person sees it: a snoozed reminder's
badge, the usage chart's days and its axis, and the code line of each run in the list."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text as sql

from db.models import CodeExecution
from db.usage import LLMCallRecord
from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, Harness, running_bot
from tests.support.schedules import local_at, wait_sent
from tests.webapp.test_browser import PHONE, Page, link

pytestmark = pytest.mark.slow  # a real browser and the bot

PRICES = '{"fake-model": [1.0, 1.0]}'  # USD per million tokens in and out: 1M tokens cost $1


async def _open(h: Harness, browser: Any, view: str) -> Page:
    """The owner's page on one tab, once that tab shows its data."""
    page = Page(await browser.new_page(viewport=PHONE))
    await page.open(link(h.app_url, OWNER))
    await page.page.click(f"#tabs button[data-view={view}]")
    await page.page.locator(f"#pane-{view}").wait_for()
    return page


def _spend(h: Harness, tokens: int, days_ago: int) -> None:
    """One chat call of `tokens` tokens (`tokens` / 1M dollars), made `days_ago` days ago."""
    h.services.usage.record_llm_call(
        LLMCallRecord(
            user_id=OWNER,
            session_id=None,
            purpose="chat",
            model="fake-model",
            prompt_tokens=tokens // 2,
            completion_tokens=tokens - tokens // 2,
        )
    )
    if days_ago:
        when = datetime.now(UTC).replace(tzinfo=None) - timedelta(days=days_ago)
        with h.services.engine.begin() as conn:
            newest = conn.execute(sql("SELECT max(id) FROM llm_calls")).scalar_one()
            conn.execute(sql("UPDATE llm_calls SET created_at = :t WHERE id = :i"), {"t": when, "i": newest})


async def _usage(page: Page) -> dict[str, Any]:
    """What the page's charts show: each chart's first and last day, bars and y-axis ticks."""
    await page.page.locator("#pane-usage figure").first.wait_for()
    figures = page.page.locator("#pane-usage figure")
    out = {}
    for i in range(await figures.count()):
        fig = figures.nth(i)
        title = await fig.locator("figcaption").inner_text()
        out[title] = {
            "x": await fig.locator(".axis-labels span").all_inner_texts(),
            "bars": await fig.locator("svg.chart g.day").count(),
            "ticks": await fig.locator(".y-axis .tick").all_inner_texts(),
            "bar_width": await fig.locator("svg.chart rect").first.evaluate(
                "r => r.getBoundingClientRect().width"
            ),
        }
    return out


async def test_a_snoozed_reminder_is_shown_snoozed_not_done(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, browser: Any
) -> None:
    async with running_bot(tmp_path, tg, llm, webapp_listen="127.0.0.1:0") as h:
        service = h.services.schedules.service
        sid = int(
            service.create(
                user_id=OWNER, chat_id=OWNER, chat_type="private", text="Stretch your legs", at=local_at(1)
            )["id"]
        )
        h.services.schedules.wake()
        (firing,) = await wait_sent(h, sid)
        until = service.snooze(OWNER, firing.id, 10)
        assert service.store.get(sid).status == "done"  # type: ignore[union-attr]  # fired; its snooze pending

        page = await _open(h, browser, "schedules")
        card = page.page.locator(f'#schedules li[data-id="{sid}"]')
        await card.wait_for()
        text = await card.inner_text()
        assert f"Next: snoozed until {until:%a %d %b %Y %H:%M}" in text
        assert await card.locator(".badge").inner_text() == "snoozed"
        assert "done" not in text
        assert page.dialogs == [] and page.errors == []


async def test_guest_answers_are_marked_in_the_usage_view(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, browser: Any
) -> None:
    async with running_bot(tmp_path, tg, llm, webapp_listen="127.0.0.1:0") as h:
        _spend(h, 1000, 0)
        h.services.usage.record_llm_call(
            LLMCallRecord(
                user_id=OWNER, session_id=None, purpose="guest", model="fake-model", prompt_tokens=700
            )
        )
        page = await _open(h, browser, "usage")
        section = page.page.locator("#other-chats")
        await section.wait_for()
        shown = await section.inner_text()
        assert "In other chats" in shown and "answers posted as a guest in other chats, 1 requests" in shown
        assert "without your memories" in shown
        assert page.dialogs == [] and page.errors == []


async def test_one_day_of_usage_fills_a_week_not_a_sliver_of_thirty_days(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, browser: Any
) -> None:
    async with running_bot(tmp_path, tg, llm, webapp_listen="127.0.0.1:0", llm_prices=PRICES) as h:
        _spend(h, 400_000, 0)  # today only
        page = await _open(h, browser, "usage")
        days = (await _app_days(h))[-7:]
        charts = await _usage(page)
        assert set(charts) == {"Tokens per day", "Cost per day (estimated)"}
        for chart in charts.values():
            assert chart["x"] == [days[0], days[-1]], chart  # the last 7 days, not 30
            assert chart["bars"] == 7
            assert chart["bar_width"] > 20  # a bar a finger can find on a 360 px screen, not a sliver
        await page.page.close()

        # Older data: the axis starts at its day.
        _spend(h, 100_000, 11)
        page = await _open(h, browser, "usage")
        days = (await _app_days(h))[-12:]
        for chart in (await _usage(page)).values():
            assert chart["x"] == [days[0], days[-1]] and chart["bars"] == 12, chart
        assert page.dialogs == [] and page.errors == []


async def _app_days(h: Harness) -> list[str]:
    from tests.webapp.client import AppClient, init_data

    async with AppClient(h.app_url, init_data(OWNER)) as client:
        days: list[str] = (await client.ok("GET", "/api/usage?days=30"))["days"]
    return days


def _decimals(label: str) -> int:
    number = re.sub(r"[^0-9.]", "", label)
    return len(number.split(".")[1]) if "." in number else 0


@pytest.mark.parametrize(
    ("amounts", "ticks"),
    [
        # $1.50 and $0.75 on two days: the axis climbs in halves of a dollar, every tick with cents.
        ((1_500_000, 750_000), ["$1.50", "$1.00", "$0.50", "$0.00"]),
        # Cheap days: steps of a fifth of a cent, every tick with the same three decimals.
        ((6_000, 2_500), ["$0.006", "$0.004", "$0.002", "$0.000"]),
    ],
)
async def test_every_tick_of_the_cost_axis_has_the_same_decimals(
    tmp_path: Path,
    tg: FakeTelegram,
    llm: FakeLLM,
    browser: Any,
    amounts: tuple[int, int],
    ticks: list[str],
) -> None:
    async with running_bot(tmp_path, tg, llm, webapp_listen="127.0.0.1:0", llm_prices=PRICES) as h:
        _spend(h, amounts[0], 0)
        _spend(h, amounts[1], 1)
        page = await _open(h, browser, "usage")
        charts = await _usage(page)
        cost = charts["Cost per day (estimated)"]["ticks"]
        assert cost == ticks
        tokens = charts["Tokens per day"]["ticks"]
        assert len(tokens) >= 2 and len({_decimals(t) for t in tokens}) == 1, tokens
        assert len({re.sub(r"[0-9.]", "", t) for t in tokens}) == 1, tokens  # one unit on the axis
        assert page.dialogs == [] and page.errors == []


async def test_each_run_in_the_list_shows_its_first_line_of_code_as_text(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, browser: Any
) -> None:
    long_line = "values = [" + ", ".join(str(n) for n in range(60)) + "]"
    hostile = '<img src=x onerror="window.__xss = 1">'
    codes = {
        "plot": "\n\nimport matplotlib.pyplot as plt\nplt.plot([1, 2])\n",
        "long": long_line + "\nprint(sum(values))",
        "hostile": f"print('{hostile}')\n",
    }
    async with running_bot(tmp_path, tg, llm, webapp_listen="127.0.0.1:0") as h:
        ids = {
            name: h.services.code.executions.record(
                CodeExecution(
                    code=code, success=True, exit_code=0, duration_ms=50, user_id=OWNER, isolation="bwrap"
                )
            )
            for name, code in codes.items()
        }
        page = await _open(h, browser, "runs")
        shown = {}
        for name, run_id in ids.items():
            card = page.page.locator(f'#runs li[data-id="{run_id}"]')
            await card.wait_for()
            shown[name] = await card.locator(".code-line").inner_text()
        assert shown["plot"] == "import matplotlib.pyplot as plt"
        assert shown["long"] == long_line[:79] + "…"
        assert shown["hostile"] == f"print('{hostile}')"  # the characters, not an image
        assert await page.page.locator("#runs img").count() == 0
        assert await page.page.evaluate("window.__xss") is None
        # The line fits the card: on a phone nothing is wider than the screen.
        assert await page.page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        assert page.dialogs == [] and page.errors == []
