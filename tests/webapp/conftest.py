"""A real browser for the app's page: Debian's chromium driven by Playwright (its own browser download is not
used). Where chromium is not installed (`apt-get install chromium`; .ci/run installs it), the browser tests
are skipped and say so."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from typing import Any

import pytest

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless=new",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]


def chromium_path() -> str | None:
    """Debian's chromium, if installed."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """A headless chromium (one per test: they are few and each opens several pages)."""
    path = chromium_path()
    if path is None:
        pytest.skip("chromium is not installed (apt-get install chromium): the app's browser tests need it")
    try:
        from playwright.async_api import async_playwright
    except ImportError:  # pragma: no cover - a dev dependency, installed by uv sync
        pytest.skip("the playwright package is not installed (uv sync installs the dev dependencies)")
    async with async_playwright() as p:
        launched = await p.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()
