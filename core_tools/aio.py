"""Small asyncio helpers shared by the packages."""

from __future__ import annotations

import asyncio
from contextlib import suppress


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait up to `seconds` for `event`; whether it is set.

    asyncio.timeout, not wait_for: on Python 3.11 wait_for can swallow a cancellation that arrives as the
    event is set, and a loop around it then never ends (a shutdown that waits for it hangs).
    """
    with suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
    return event.is_set()
