"""The OpenAI SDK, imported where a request first needs it rather than with core_tools.llm.

Importing it (openai.types alone defines some 700 pydantic models) was ~0.5 s of CPU, the largest share
of a bot's start-up, and nothing on the way to the first poll needs it. `warm` imports it in a worker
thread once the bot polls; a request that comes sooner waits for that import (the interpreter's import
lock), as it used to wait for the whole start-up.
"""

from __future__ import annotations

import asyncio
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from openai import AsyncOpenAI


def sdk() -> ModuleType:
    """The openai module (imported on the first call; a dictionary lookup after that)."""
    import openai

    return openai


async def warm() -> None:
    """Import the SDK in a worker thread, ahead of the first request (nothing once it is imported)."""
    await asyncio.to_thread(sdk)


class LazyClient:
    """An SDK client on the aiohttp transport (about a third less CPU per streamed request than the
    default httpx one), made at its first use."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._client: AsyncOpenAI | None = None

    def get(self) -> AsyncOpenAI:
        """The client, made now if not yet."""
        if self._client is None:
            from openai import AsyncOpenAI, DefaultAioHttpClient

            timeout = self._options["timeout"]
            self._client = AsyncOpenAI(**self._options, http_client=DefaultAioHttpClient(timeout=timeout))
        return self._client

    async def close(self) -> None:
        """Close the client, if it was made."""
        if self._client is not None:
            await self._client.close()
