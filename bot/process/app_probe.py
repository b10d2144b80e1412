"""The doctor's line for the app: WEBAPP_LISTEN usable, and WEBAPP_URL reaching it (through the operator's
reverse proxy), over https:// as Telegram requires.

When the bot is not running, nothing listens on WEBAPP_LISTEN: the doctor then listens there itself for the
length of the probe, answering with a random token, and asks WEBAPP_URL for it. The token coming back proves
that the public address reaches this port, whatever the proxy in between."""

from __future__ import annotations

import asyncio
import secrets

import httpx
from aiohttp import web

from bot.config.settings import Settings
from bot.process.checks import Check
from core_tools.text import clip

PAGE_MARKER = b"<title>Assistant</title>"  # in bot/webapp/static/index.html


async def _get(client: httpx.AsyncClient, url: str) -> httpx.Response | str:
    """The response, or why there is none (one short line)."""
    try:
        return await client.get(url)
    except httpx.TimeoutException:
        return "no answer in time"
    except httpx.HTTPError as exc:
        return clip(f"{type(exc).__name__}: {exc}", 120) if str(exc) else type(exc).__name__


async def _stand_in(host: str, port: int, token: str) -> web.AppRunner | None:
    """Listen on host:port with a server that answers every GET with `token`; None if the port is taken."""

    async def answer(_: web.Request) -> web.Response:
        return web.Response(text=token)

    app = web.Application()
    app.router.add_get("/{tail:.*}", answer)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError:
        await runner.cleanup()
        return None
    return runner


async def check_app(settings: Settings, timeout_s: float) -> Check:
    """The app's line: off, or where it listens and whether WEBAPP_URL reaches it."""
    address = settings.webapp_address
    if address is None:
        return Check("app", True, "off (WEBAPP_LISTEN is empty)")
    host, port = address
    listen = settings.webapp_listen
    if port == 0:
        return Check("app", True, f"{listen}: a free port chosen at each start (WEBAPP_URL not checked)")
    local = f"http://{'127.0.0.1' if host in ('0.0.0.0', '', '::') else host}:{port}/"  # noqa: S104
    token = secrets.token_hex(16)
    async with httpx.AsyncClient(timeout=timeout_s, follow_redirects=True, trust_env=False) as client:
        answer = await _get(client, local)
        runner = None
        if isinstance(answer, httpx.Response):
            if PAGE_MARKER not in answer.content:
                fix = f"free port {port} or choose another WEBAPP_LISTEN"
                return Check("app", False, f"{listen} is taken by another server", fix)
            where, expect = f"the bot serves it on {listen}", PAGE_MARKER
        else:
            runner = await _stand_in(host, port, token)
            if runner is None:
                return Check("app", False, f"cannot listen on {listen}", "choose a free HOST:PORT")
            where, expect = f"{listen} is free (the bot serves the app there)", token.encode()
        try:
            return await _public(client, settings.webapp_url, listen, where, expect)
        finally:
            if runner is not None:
                await runner.cleanup()


async def _public(
    client: httpx.AsyncClient, url: str | None, listen: str | None, where: str, expect: bytes
) -> Check:
    """Whether WEBAPP_URL answers with what is served on WEBAPP_LISTEN (`expect`), over https."""
    if not url:
        fix = "set WEBAPP_URL to the https:// address your reverse proxy serves WEBAPP_LISTEN at"
        detail = f"{where}; no WEBAPP_URL, so /app and the menu button are off"
        return Check("app", True, detail, fix, warning=True)
    public = await _get(client, url)
    if isinstance(public, str) or expect not in public.content:
        got = public if isinstance(public, str) else f"HTTP {public.status_code}, not the app"
        fix = f"make your reverse proxy forward {url} to {listen}"
        return Check("app", False, f"{where}; {url} does not reach it ({got})", fix)
    if not url.startswith("https://"):
        fix = "serve it over https:// (Telegram opens Mini Apps only from https:// pages)"
        return Check("app", True, f"{where}; {url} reaches it, over plain http", fix, warning=True)
    return Check("app", True, f"{where}; {url} reaches it")


async def bounded_check_app(settings: Settings, timeout_s: float) -> Check:
    """check_app within `timeout_s` overall."""
    try:
        async with asyncio.timeout(timeout_s + 1):
            return await check_app(settings, timeout_s)
    except TimeoutError:
        fix = "check WEBAPP_URL and your reverse proxy"
        return Check("app", False, f"no answer within {timeout_s:g} s", fix, timed_out=True)
