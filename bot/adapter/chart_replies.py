"""Replies with a chart: the text, and a PNG drawn on demand in a worker thread.

The plotting module (bot/adapter/charts.py, Pillow) is imported by the drawing function only, the first time a
chart is asked for: a plain turn never loads it. At most CHART_SLOTS charts are drawn at once, and the text
never waits on a chart that fails or takes too long (it is sent without it).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from telegram import Message
from telegram.error import TelegramError

from bot.adapter.render import plain_chunks, utf16_len

log = logging.getLogger(__name__)

CAPTION_LIMIT = 1024  # Telegram's limit of a photo's caption (UTF-16 units)
TEXT_LIMIT = 4000
CHART_SLOTS = 2  # charts a command draws at once (each is CPU work in a worker thread)
CHART_TIMEOUT_S = 30.0


class ChartReplies:
    """Draws charts for one command's handler, at most CHART_SLOTS at a time."""

    def __init__(self, slots: int = CHART_SLOTS, timeout_s: float = CHART_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._slots = asyncio.Semaphore(slots)

    async def draw(self, make_png: Callable[[], bytes | None]) -> bytes | None:
        """Run `make_png` (its queries and drawing) in a worker thread, bounded in number and time; None
        when there is nothing to draw or it failed (logged)."""
        try:
            async with self._slots:
                return await asyncio.wait_for(asyncio.to_thread(make_png), self.timeout_s)
        except TimeoutError:
            log.warning("a chart took longer than %.0f s; the text is sent without it", self.timeout_s)
        except Exception:
            log.exception("could not draw a chart; the text is sent without it")
        return None

    async def reply(
        self, message: Message, text: str, make_png: Callable[[], bytes | None], caption: str
    ) -> None:
        """Answer with `text` and the chart: one photo captioned with the text when it fits in a caption,
        else the text then the photo with the short `caption`. Without a chart, the text alone."""
        await send_with_chart(message, text, await self.draw(make_png), caption)


async def send_with_chart(message: Message, text: str, png: bytes | None, caption: str) -> None:
    """Send `text` and the chart `png` (see ChartReplies.reply)."""
    if png is not None and utf16_len(text) <= CAPTION_LIMIT:
        try:
            await message.reply_photo(png, caption=text)
            return
        except TelegramError as exc:
            log.warning("could not send a chart: %s", exc)
            png = None
    for part in plain_chunks(text, TEXT_LIMIT):
        await message.reply_text(part)
    if png is None:
        return
    try:
        await message.reply_photo(png, caption=caption)
    except TelegramError as exc:
        log.warning("could not send a chart: %s", exc)
