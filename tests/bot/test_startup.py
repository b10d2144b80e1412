"""Start-up to polling (issue 32 §7): the garbage collector is off while the process starts and settled
once the application has started (bot/__main__.py, `settle_when_serving`)."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest
from telegram.ext import Application

from bot.__main__ import settle_when_serving
from bot.process.heap import YOUNG_THRESHOLD


@pytest.fixture
def collector() -> Iterator[None]:
    """The collector off, as `python -m bot` has it while starting; as it was afterwards."""
    threshold, enabled = gc.get_threshold(), gc.isenabled()
    gc.disable()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)
    if enabled:
        gc.enable()


@pytest.mark.usefixtures("collector")
async def test_the_collector_is_settled_after_the_start_up_hook() -> None:
    app = Application.builder().token("123:ABC").build()
    hooked: list[bool] = []

    async def on_startup(application: object) -> None:
        hooked.append(gc.isenabled())

    app.post_init = on_startup
    settle_when_serving(app, delay_s=0)
    assert app.post_init is not None
    await app.post_init(app)
    assert hooked == [False]  # the start-up hook ran first, with the collector still off
    for _ in range(100):  # the settling is a callback of the loop: a few turns of it
        if gc.isenabled():
            break
        await asyncio.sleep(0)
    assert gc.isenabled() and gc.get_freeze_count() > 0
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD
