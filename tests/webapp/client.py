"""Talking to the app as its page does: signed launch data in `Authorization: tma ...`, over real HTTP."""

from __future__ import annotations

import time
from typing import Any

import aiohttp

from bot.webapp.auth import sign
from tests.support.harness import TOKEN

DAY = 86_400


def init_data(user_id: int, *, age_s: int = 0, token: str = TOKEN, **extra: str) -> str:
    """Init data for `user_id`, signed `age_s` seconds ago with `token` (the bot's, unless a test forges)."""
    return sign(
        {"id": user_id, "first_name": f"User{user_id}"}, token, auth_date=int(time.time()) - age_s, **extra
    )


def forged(user_id: int) -> str:
    """Init data whose user was changed after Telegram signed it (the hash no longer matches)."""
    signed = init_data(user_id + 1)
    return signed.replace(f"%22id%22%3A{user_id + 1}", f"%22id%22%3A{user_id}")


class AppClient:
    """An HTTP client of the app's API for one user (or one set of init data)."""

    def __init__(self, base_url: str, data: str | None) -> None:
        self.base_url = base_url.rstrip("/")
        headers = {"Authorization": f"tma {data}"} if data is not None else {}
        self.session = aiohttp.ClientSession(headers=headers)

    async def __aenter__(self) -> AppClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.session.close()

    async def call(self, method: str, path: str, body: Any = None, **kwargs: Any) -> tuple[int, Any]:
        """(status, JSON body or None) of one request to `path` (e.g. "/api/me")."""
        async with self.session.request(method, self.base_url + path, json=body, **kwargs) as resp:
            try:
                data = await resp.json(content_type=None)
            except ValueError:
                data = None
            return resp.status, data

    async def ok(self, method: str, path: str, body: Any = None) -> Any:
        """The JSON of a request that must answer 200."""
        status, data = await self.call(method, path, body)
        assert status == 200, (method, path, status, data)
        return data
