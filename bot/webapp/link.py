"""A link that opens the app the way a Telegram client does, signed with the bot's token: for trying the app
in a browser without Telegram (`python -m bot webapp-link USER_ID`) and for the tests.

Telegram clients open a Mini App with its launch parameters in the URL fragment:
`#tgWebAppData=<url-encoded init data>&tgWebAppVersion=...&tgWebAppPlatform=...&tgWebAppThemeParams=<json>`.
Whoever has such a link is that user until it expires (WEBAPP_AUTH_MAX_AGE_S): treat it as a password.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode

from bot.webapp.auth import sign

# Telegram's theme parameters as its clients send them (the keys of ThemeParams), a light and a dark one.
LIGHT_THEME = {
    "bg_color": "#ffffff",
    "secondary_bg_color": "#f1f1f4",
    "section_bg_color": "#ffffff",
    "text_color": "#000000",
    "hint_color": "#999999",
    "subtitle_text_color": "#8a8a8e",
    "link_color": "#2481cc",
    "accent_text_color": "#2481cc",
    "button_color": "#2481cc",
    "button_text_color": "#ffffff",
    "destructive_text_color": "#d14e4e",
    "section_separator_color": "#e7e7e9",
    "header_bg_color": "#ffffff",
}
DARK_THEME = {
    "bg_color": "#17212b",
    "secondary_bg_color": "#232e3c",
    "section_bg_color": "#17212b",
    "text_color": "#f5f5f5",
    "hint_color": "#708499",
    "subtitle_text_color": "#708499",
    "link_color": "#6ab3f3",
    "accent_text_color": "#6ab2f2",
    "button_color": "#5288c1",
    "button_text_color": "#ffffff",
    "destructive_text_color": "#ec3942",
    "section_separator_color": "#111921",
    "header_bg_color": "#17212b",
}
VERSION = "8.0"


def launch_fragment(init_data: str, theme: Mapping[str, str] | None = None, platform: str = "weba") -> str:
    """The URL fragment (without '#') a Telegram client opens a Mini App with."""
    params = {"tgWebAppData": init_data, "tgWebAppVersion": VERSION, "tgWebAppPlatform": platform}
    if theme is not None:
        params["tgWebAppThemeParams"] = json.dumps(dict(theme), separators=(",", ":"))
    return urlencode(params, quote_via=quote)


def signed_link(
    base_url: str,
    bot_token: str,
    user: Mapping[str, Any],
    *,
    dark: bool = False,
    auth_date: int | None = None,
) -> str:
    """`base_url` with the launch fragment of init data for `user`, signed with `bot_token`."""
    init_data = sign(user, bot_token, auth_date=auth_date, query_id=f"LOCAL{secrets.token_hex(8)}")
    return f"{base_url}#{launch_fragment(init_data, DARK_THEME if dark else LIGHT_THEME)}"
