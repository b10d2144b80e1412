"""The second channel (ALERT_WEBHOOK_URL): a condition's onset POSTed as JSON {"text": "..."} (Slack and
Mattermost incoming webhooks take it as is), for when Telegram itself is the problem. Never blocks the
watchdog: each alert is a task of its own with a short timeout. The URL may hold a token: a log line names
only its scheme and host."""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import urlsplit

import httpx

log = logging.getLogger(__name__)

ALERT_TIMEOUT_S = 5.0


def shown_url(url: str) -> str:
    """The URL as a log line may show it: scheme and host, the rest (a token) left out."""
    parts = urlsplit(url)
    host = parts.hostname or "?"
    return f"{parts.scheme}://{host}/\u2026"


class AlertWebhook:
    """POSTs alerts to `url`; `sent` counts those answered 2xx."""

    def __init__(self, url: str, timeout_s: float = ALERT_TIMEOUT_S) -> None:
        self._url = url
        self.timeout_s = timeout_s
        self.sent = 0
        self.failed = 0
        self._tasks: set[asyncio.Task[None]] = set()

    def send(self, text: str) -> None:
        """Post `text` in the background (in the running event loop)."""
        task = asyncio.get_running_loop().create_task(self._post(text), name="alert-webhook")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _post(self, text: str) -> None:
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s) as client:
                response = await client.post(self._url, json={"text": text})
            if response.status_code >= 300:
                raise ValueError(f"HTTP {response.status_code}")
            self.sent += 1
        except Exception as exc:  # best effort: the log and the health file have the condition
            self.failed += 1
            why = str(exc) if isinstance(exc, ValueError) else type(exc).__name__  # never the URL
            log.warning("the alert webhook at %s failed: %s", shown_url(self._url), why)

    async def drain(self) -> None:
        """Wait for the alerts under way (at stop, bounded by their timeout)."""
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
