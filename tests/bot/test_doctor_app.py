"""The doctor's line for the app: WEBAPP_LISTEN free or served, and WEBAPP_URL reaching it through a real
reverse proxy on 127.0.0.1 (or not), each failure with what to do."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from bot.config.settings import Settings
from bot.process.app_probe import check_app
from tests.support.harness import TOKEN


def settings(**values: Any) -> Settings:
    base = {"telegram_bot_token": TOKEN, "openai_api_key": "sk-test", "allowed_user_ids": "1"}
    return Settings(_env_file=None, **base, **values)  # type: ignore[call-arg]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[web.Application], Any]]:
    """Start aiohttp applications on free ports of 127.0.0.1; their base URLs; all stopped at the end."""
    runners: list[web.AppRunner] = []

    async def start(app: web.Application) -> str:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        port = free_port()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)
        return f"http://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


def proxy_to(target: str) -> web.Application:
    """A reverse proxy serving /app/ from `target`'s / (as an operator's nginx would)."""

    async def forward(request: web.Request) -> web.Response:
        tail = request.match_info["tail"]
        async with httpx.AsyncClient() as client:
            got = await client.get(f"{target}/{tail}")
        return web.Response(body=got.content, status=got.status_code)

    app = web.Application()
    app.router.add_get("/app/{tail:.*}", forward)
    return app


async def test_off_while_webapp_listen_is_empty() -> None:
    check = await check_app(settings(), 3)
    assert check.ok and check.line() == "ok   app: off (WEBAPP_LISTEN is empty)"


async def test_a_proxy_that_reaches_the_port_passes_and_plain_http_is_a_warning(
    serve: Callable[[web.Application], Any],
) -> None:
    port = free_port()
    proxy = await serve(proxy_to(f"http://127.0.0.1:{port}"))
    check = await check_app(settings(webapp_listen=f"127.0.0.1:{port}", webapp_url=f"{proxy}/app/"), 3)
    assert check.ok and check.warning, check.line()
    assert f"{proxy}/app/ reaches it, over plain http" in check.line()
    assert "Fix: serve it over https://" in check.line()
    # The probe's own listener is gone: the bot can take the port.
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


async def test_a_proxy_pointing_elsewhere_fails_with_a_fix(serve: Callable[[web.Application], Any]) -> None:
    elsewhere = await serve(web.Application())  # answers 404 to everything
    proxy = await serve(proxy_to(elsewhere))
    port = free_port()
    check = await check_app(settings(webapp_listen=f"127.0.0.1:{port}", webapp_url=f"{proxy}/app/"), 3)
    assert not check.ok
    assert f"{proxy}/app/ does not reach it (HTTP 404, not the app)" in check.line()
    assert f"Fix: make your reverse proxy forward {proxy}/app/ to 127.0.0.1:{port}" in check.line()


async def test_nothing_at_webapp_url_fails_with_a_fix() -> None:
    port, nobody = free_port(), free_port()
    url = f"http://127.0.0.1:{nobody}/app/"
    check = await check_app(settings(webapp_listen=f"127.0.0.1:{port}", webapp_url=url), 3)
    assert not check.ok and "ConnectError" in check.line() and "Fix: make your reverse proxy" in check.line()


async def test_a_port_taken_by_another_server_fails(serve: Callable[[web.Application], Any]) -> None:
    other = await serve(web.Application())
    listen = other.removeprefix("http://")
    check = await check_app(settings(webapp_listen=listen), 3)
    assert not check.ok and check.line().startswith(f"FAIL app: {listen} is taken by another server")


async def test_no_webapp_url_is_a_warning_naming_the_setting() -> None:
    check = await check_app(settings(webapp_listen=f"127.0.0.1:{free_port()}"), 3)
    assert check.ok and check.warning
    assert "no WEBAPP_URL" in check.line() and "Fix: set WEBAPP_URL" in check.line()


async def test_the_running_bots_page_is_recognised_through_the_proxy(
    serve: Callable[[web.Application], Any],
) -> None:
    """The bot's own server on WEBAPP_LISTEN (its real index.html) is told from another server's."""
    page = (Path(__file__).resolve().parents[2] / "bot" / "webapp" / "static" / "index.html").read_bytes()

    async def index(_: web.Request) -> web.Response:
        return web.Response(body=page, content_type="text/html")

    app = web.Application()
    app.router.add_get("/{tail:.*}", index)
    bot_page = await serve(app)
    proxy = await serve(proxy_to(bot_page))
    listen = bot_page.removeprefix("http://")
    check = await check_app(settings(webapp_listen=listen, webapp_url=f"{proxy}/app/"), 3)
    assert check.ok, check.line()
    assert f"the bot serves it on {listen}; {proxy}/app/ reaches it" in check.line()
