"""Telegram Mini App init data: checking its signature as the Bot API documents it, and making one.

Telegram signs the launch data it hands a Mini App ("Validating data received via the Mini App"):
secret key = HMAC-SHA256 of the bot token keyed with "WebAppData"; the `hash` field is the hex HMAC-SHA256,
under that key, of the data-check-string: every other received field as `key=value` (values URL-decoded),
sorted by key, joined by line feeds. Only `hash` is left out: the `signature` field of newer clients (an
Ed25519 signature for third parties) is one of the signed fields. The user is taken from the verified data
only, and data older than the allowed age is refused, so a copied link stops working.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode

from bot.config.args import parse_int

MAX_INIT_DATA = 4096  # bytes: real init data is well under 1 KB; anything longer is refused unread
FUTURE_SKEW_S = 300  # an auth_date this far ahead of our clock is refused too (a clock is off, or forged)


class AuthError(Exception):
    """Init data that does not prove who the user is; the message says why (for the log and the page)."""


@dataclass(frozen=True)
class InitData:
    """The verified launch data: who opened the app, and when Telegram signed it."""

    user_id: int
    first_name: str | None
    username: str | None
    language_code: str | None
    auth_date: int
    fields: Mapping[str, str]


def secret_key(bot_token: str) -> bytes:
    """The key init data is signed with: HMAC-SHA256 of the bot token, keyed with "WebAppData"."""
    return hmac.new(b"WebAppData", bot_token.encode(), hashlib.sha256).digest()


def data_check_string(fields: Mapping[str, str]) -> str:
    """Every field but `hash` as key=value, sorted by key, joined by line feeds."""
    return "\n".join(f"{k}={v}" for k, v in sorted(fields.items()) if k != "hash")


def _hash(fields: Mapping[str, str], key: bytes) -> str:
    return hmac.new(key, data_check_string(fields).encode(), hashlib.sha256).hexdigest()


def verify(raw: str, key: bytes, *, max_age_s: float, now: float | None = None) -> InitData:
    """The user of signed init data (the query string Telegram gives the page); AuthError when it is not
    signed with `key` (see `secret_key`), is older than `max_age_s`, or names no user."""
    if not raw or len(raw) > MAX_INIT_DATA:
        raise AuthError("no init data" if not raw else "init data too long")
    try:
        pairs = parse_qsl(raw, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise AuthError("init data is not a query string") from None
    fields = dict(pairs)
    if len(fields) != len(pairs):
        raise AuthError("a field appears twice")
    given = fields.get("hash", "")
    # Constant time: how much of a forged hash matched must not show in the answer's timing.
    if not hmac.compare_digest(_hash(fields, key).encode(), given.encode()):
        raise AuthError("the hash does not match: not signed by Telegram for this bot")
    signed_at = parse_int(fields.get("auth_date", ""), 0, 2**40)  # ASCII digits only ("³" is a digit too)
    if signed_at is None:
        raise AuthError("no auth_date, or not a Unix time")
    clock = time.time() if now is None else now
    age = clock - signed_at
    if age > max_age_s:
        raise AuthError(f"expired: signed {int(age)} s ago, at most {int(max_age_s)} s are allowed")
    if age < -FUTURE_SKEW_S:
        raise AuthError("auth_date is in the future")
    try:
        user: Any = json.loads(fields.get("user", ""))
    except (ValueError, RecursionError):  # RecursionError: nested thousands deep
        raise AuthError("no user in the init data") from None
    if not isinstance(user, dict) or not isinstance(user.get("id"), int) or isinstance(user["id"], bool):
        raise AuthError("no user id in the init data")

    def text(name: str) -> str | None:
        value = user.get(name)
        if not isinstance(value, str):
            return None
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate ("\ud800" parses): no text to show or store
            return None
        return value

    return InitData(
        user_id=user["id"],
        first_name=text("first_name"),
        username=text("username"),
        language_code=text("language_code"),
        auth_date=signed_at,
        fields=fields,
    )


def sign(user: Mapping[str, Any], bot_token: str, *, auth_date: int | None = None, **extra: str) -> str:
    """Init data for `user` signed as Telegram signs it (tests, and `python -m bot webapp-link`)."""
    fields = {
        "auth_date": str(int(time.time()) if auth_date is None else auth_date),
        "user": json.dumps(dict(user), separators=(",", ":"), ensure_ascii=False),
        **extra,
    }
    fields["hash"] = _hash(fields, secret_key(bot_token))
    return urlencode(fields)
