"""Running the upgrade's async parts (the self-test, the owner's message) from synchronous code, which may
itself be called inside a running event loop (`python -m bot mcp` builds its services there)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


def run_sync(make: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run the coroutine `make()` makes to its end: here, or in a thread of its own under a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(make())
    with ThreadPoolExecutor(1, thread_name_prefix="upgrade") as pool:
        return pool.submit(lambda: asyncio.run(make())).result()
