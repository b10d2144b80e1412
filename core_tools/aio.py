"""Small asyncio helpers shared by the packages."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from contextlib import suppress
from typing import TypeVar

T = TypeVar("T")


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait up to `seconds` for `event`; whether it is set.

    asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that arrives as the
    event is set, and a loop around it then never ends (a shutdown that waits for it hangs).
    """
    with suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
    return event.is_set()


async def settled(call: Callable[[], T], *, off_loop: bool) -> T:
    """Run a blocking call (one database transaction) to its end as if it ran on the event loop itself.

    `off_loop` (PostgreSQL: the call waits on the network) runs it in a worker thread so other chats go on
    meanwhile; otherwise it runs inline (SQLite: a fraction of a millisecond of CPU, less than a thread hop,
    which also waits for the GIL behind a busy loop). A cancellation that comes while it runs does not
    leave its outcome unknown: it waits for the call to end and is delivered at the caller's next await,
    as it would be after an inline call.
    """
    if not off_loop:
        return call()
    # In this task's context (as asyncio.to_thread): the scheduled task run a call is made for goes along.
    context = contextvars.copy_context()
    future = asyncio.get_running_loop().run_in_executor(None, context.run, call)
    interrupted = False
    try:
        while True:
            try:
                return await asyncio.shield(future)
            except asyncio.CancelledError:
                if future.cancelled():  # (never by shield: only if the executor itself gave up on it)
                    raise
                interrupted = True  # the call goes on: wait for its outcome, then deliver the cancellation
    finally:
        task = asyncio.current_task()
        if interrupted and task is not None:
            task.uncancel()  # the cancellation caught above, delivered again (the count stays as it was)
            task.cancel()
