"""core_tools.aio.settled: a blocking call (a database transaction) run in a worker thread keeps the meaning
it has on the event loop: a cancellation that comes while it runs waits for its outcome, which the caller
gets, and arrives at the caller's next await."""

from __future__ import annotations

import asyncio
import threading

import pytest

from core_tools.aio import settled


async def test_a_cancellation_during_the_call_waits_for_its_outcome_and_comes_after() -> None:
    started, release = threading.Event(), threading.Event()
    done: list[str] = []
    seen: list[str] = []

    def commit() -> str:
        started.set()
        release.wait(30)
        done.append("committed")
        return "row 7"

    async def turn() -> None:
        seen.append(await settled(commit, off_loop=True))  # the caller learns what was stored
        await asyncio.sleep(0)  # its next await: the cancellation arrives here
        seen.append("went on")

    task = asyncio.create_task(turn())
    await asyncio.to_thread(started.wait, 30)
    task.cancel()  # a /stop while the transaction runs
    await asyncio.sleep(0.05)
    assert not task.done()  # it waits for the transaction rather than leaving its outcome unknown
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert done == ["committed"] and seen == ["row 7"]


async def test_off_the_loop_the_loop_serves_others_meanwhile() -> None:
    release = threading.Event()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while not release.is_set():
            ticks += 1
            await asyncio.sleep(0.01)

    other = asyncio.create_task(ticker())
    call = asyncio.create_task(settled(lambda: release.wait(30), off_loop=True))
    while ticks < 5:  # other chats' work goes on while the call waits
        await asyncio.sleep(0.01)
    release.set()
    assert await call is True
    await other


async def test_inline_the_call_runs_on_the_loop() -> None:
    where: list[int] = []
    assert await settled(lambda: where.append(threading.get_ident()) or 3, off_loop=False) == 3
    assert where == [threading.get_ident()]
