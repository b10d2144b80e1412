"""/usage and /codestats answer with a chart (a PNG photo) as well as the text: the real bot, the fake Bot
API, the fake LLM; a plain turn does not load the plotting code (checked in a fresh interpreter)."""

from __future__ import annotations

import asyncio
import io
import json
import sys
from datetime import timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import telegram
from PIL import Image

from bot.adapter import charts
from bot.adapter.chart_replies import CAPTION_LIMIT, send_with_chart
from bot.adapter.render import utf16_len
from core_tools.usage.series import UsageSeries, day_buckets
from db.models import CodeExecution, utcnow
from tests.support.fakes.openai_api import FakeLLM, text
from tests.support.fakes.telegram_api import Call, FakeTelegram, UploadedFile
from tests.support.harness import FRIEND, OWNER, TOKEN, Harness, running_bot
from tests.support.processes import REPO

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PRICES = '{"fake-model": [1.0, 2.0]}'


def photo_of(call: Call) -> Image.Image:
    """The PNG a sendPhoto call uploaded, checked and decoded."""
    upload = call.params["photo"]
    assert isinstance(upload, UploadedFile)
    assert upload.data.startswith(PNG_SIGNATURE)
    image = Image.open(io.BytesIO(upload.data))
    image.load()  # decodes every row: a broken stream raises here
    assert image.format == "PNG"
    return image.convert("RGB")


def pixels(image: Image.Image, color: tuple[int, int, int]) -> int:
    """How many pixels have exactly this colour (a series' bars)."""
    return sum(n for n, c in image.getcolors(maxcolors=1 << 20) or [] if c == color)


async def photos(h: Harness, user: int, count: int) -> list[Call]:
    return await h.tg.wait_for_call("sendPhoto", count=count, chat_id=user)


async def test_usage_answers_with_a_chart_of_tokens_and_cost_per_day(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, llm_prices=PRICES) as h:
        llm.script(text("Hello there."))
        tg.push_text(OWNER, "hello")
        await h.final_text(OWNER, "Hello there.")
        tg.push_text(OWNER, "/usage week")
        (call,) = await photos(h, OWNER, 1)
        caption = call.params["caption"]
        assert caption.startswith("Usage this week") and "Estimated cost: $0.0" in caption
        assert not any("Usage this week" in t for t in tg.sent_texts(OWNER) if t != caption)  # sent once
        image = photo_of(call)
        assert image.width == charts.WIDTH
        # The chat purpose's bars (tokens) and the model's (cost) are drawn, in the first palette colour:
        # one bar in each panel, today's.
        top, bottom = (
            image.crop((0, 0, image.width, image.height // 2)),
            image.crop((0, image.height // 2, image.width, image.height)),
        )
        assert pixels(top, charts.PALETTE[0]) > 500 and pixels(bottom, charts.PALETTE[0]) > 500
        # A chart without data has none of them: the check above can fail.
        empty = UsageSeries(day_buckets(utcnow().date(), 7, ZoneInfo("UTC")))
        blank = Image.open(io.BytesIO(charts.usage_png(empty, "Usage"))).convert("RGB")
        assert pixels(blank, charts.PALETTE[0]) == 0

        # Today's chart is per hour; another user with no usage gets the text alone.
        tg.push_text(OWNER, "/usage")
        (_, today) = await photos(h, OWNER, 2)
        assert today.params["caption"].startswith("Usage today")
        await h.command(FRIEND, "/usage month", "Nothing yet.")
        await h.command(OWNER, "/usage all", "Usage of all users today")  # the owner's overview: no chart
        assert len(tg.calls_to("sendPhoto")) == 2


async def test_codestats_answers_with_a_chart_of_runs_per_day_by_outcome(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        await h.command(OWNER, "/codestats", "No code runs in the last 7 days.")
        runs = [(True, None, 0), (True, None, 1), (False, "timeout", 1), (False, "syntax_error", 2)]
        for success, category, days_ago in runs:
            h.services.code.executions.record(
                CodeExecution(
                    code="print(1)",
                    success=success,
                    error_category=category,
                    user_id=OWNER,
                    isolation="bwrap",
                    duration_ms=20,
                    created_at=utcnow() - timedelta(days=days_ago),
                )
            )
        tg.push_text(OWNER, "/codestats")
        (call,) = await photos(h, OWNER, 1)
        assert call.params["caption"].startswith("Code runs in the last 7 days\nTotal: 4 · succeeded: 2")
        image = photo_of(call)
        assert pixels(image, charts.GREEN) > 1000  # the succeeded runs' bars
        assert pixels(image, charts.PALETTE[0]) > 300 and pixels(image, charts.PALETTE[1]) > 300  # two kinds
        await h.command(OWNER, "/codestats lots", "Usage: /codestats [days]")
        assert len(tg.calls_to("sendPhoto")) == 1


async def test_a_plain_turn_does_not_load_the_plotting_code(tmp_path: Path) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.bot.chart_probe",
        str(tmp_path),
        cwd=REPO,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=240)
    assert proc.returncode == 0, err.decode()[-3000:]
    seen = json.loads(out.decode().strip().splitlines()[-1])
    assert seen["after_turn"] == {"PIL": False, "PIL.Image": False, "bot.adapter.charts": False}
    assert seen["after_usage"] == {"PIL": True, "PIL.Image": True, "bot.adapter.charts": True}


async def test_a_text_too_long_for_a_caption_comes_first_then_the_chart(tg: FakeTelegram) -> None:
    png = charts.render("Chart", [charts.Panel("Bars", ["a", "b"], {"x": [1.0, 2.0]}, str)])
    async with telegram.Bot(TOKEN, base_url=tg.base_url) as bot:
        asked = await bot.send_message(OWNER, "/usage")
        short = "Usage today\nTokens: 1.2k"
        await send_with_chart(asked, short, png, "Tokens and estimated cost per hour")
        (one,) = tg.calls_to("sendPhoto")
        assert one.params["caption"] == short  # one message: the photo, the text as its caption
        long = "Usage this month\n" + "\n".join(f"line {i}: " + "x" * 40 for i in range(40))
        assert utf16_len(long) > CAPTION_LIMIT
        await send_with_chart(asked, long, png, "Tokens and estimated cost per day")
        _, two = tg.calls_to("sendPhoto")
        assert two.params["caption"] == "Tokens and estimated cost per day"
        texts = tg.sent_texts(OWNER)
        assert texts[-2] == long and texts[-1] == "Tokens and estimated cost per day"  # text, then chart
        tg.fail_next("sendPhoto", error="server_error")
        await send_with_chart(asked, short, png, "caption")
        assert tg.sent_texts(OWNER)[-1] == short  # the photo failed: the text still arrives
