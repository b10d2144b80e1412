"""Telegram's init-data check (bot/webapp/auth.py) on what a client sends; the signed local link."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from pathlib import Path
from urllib.parse import parse_qsl, quote, urlsplit

import pytest

from bot.__main__ import main
from bot.webapp.auth import AuthError, data_check_string, secret_key, sign, verify
from tests.support.harness import OWNER, TOKEN

KEY = secret_key(TOKEN)
DAY = 86_400


def test_signed_data_gives_its_user_and_nothing_else_does() -> None:
    raw = sign({"id": OWNER, "first_name": "Ann", "username": "ann"}, TOKEN, query_id="AAH1")
    user = verify(raw, KEY, max_age_s=DAY)
    assert (user.user_id, user.first_name, user.username) == (OWNER, "Ann", "ann")
    with pytest.raises(AuthError, match="hash does not match"):
        verify(raw, secret_key("999:ANOTHER-BOT-token"), max_age_s=DAY)
    # Any field changed after signing: the user, the date, an added field.
    for changed in (
        raw.replace(quote(f'"id":{OWNER}'), quote('"id":222')),
        raw.replace("auth_date=", "auth_date=1"),
        raw + "&start_param=x",
        raw.replace("&hash=", "&hash=0"),
    ):
        assert changed != raw
        with pytest.raises(AuthError):
            verify(changed, KEY, max_age_s=DAY)


def test_the_signature_field_of_newer_clients_is_one_of_the_signed_fields() -> None:
    # Bot API 8.0 added `signature` (Ed25519, for third parties); the bot's own check still covers it, as it
    # covers every field but `hash`.
    raw = sign({"id": OWNER}, TOKEN, signature="c2lnbmF0dXJl")
    assert verify(raw, KEY, max_age_s=DAY).user_id == OWNER
    fields = dict(parse_qsl(raw))
    without = "&".join(f"{k}={quote(v)}" for k, v in fields.items() if k != "signature")
    with pytest.raises(AuthError):
        verify(without, KEY, max_age_s=DAY)


def test_old_future_malformed_or_userless_data_is_refused() -> None:
    now = 1_800_000_000
    old = sign({"id": OWNER}, TOKEN, auth_date=now - DAY - 1)
    with pytest.raises(AuthError, match="expired"):
        verify(old, KEY, max_age_s=DAY, now=now)
    assert verify(old, KEY, max_age_s=DAY + 10, now=now).user_id == OWNER
    with pytest.raises(AuthError, match="future"):
        verify(sign({"id": OWNER}, TOKEN, auth_date=now + 3600), KEY, max_age_s=DAY, now=now)

    def signed(fields: dict[str, str]) -> str:  # signed by the bot's key whatever the fields say
        raw = "&".join(f"{k}={quote(v)}" for k, v in fields.items())
        return raw + "&hash=" + hmac.new(KEY, data_check_string(fields).encode(), hashlib.sha256).hexdigest()

    for user in ({"first_name": "no id"}, {"id": "111"}, {"id": True}, ["list"]):
        with pytest.raises(AuthError, match="user"):
            verify(signed({"auth_date": str(now), "user": json.dumps(user)}), KEY, max_age_s=DAY, now=now)
    for date in ("", "²", "1e9", "-5", "9" * 40):
        with pytest.raises(AuthError, match="auth_date"):
            verify(signed({"auth_date": date, "user": '{"id": 1}'}), KEY, max_age_s=DAY, now=now)
    signed = sign({"id": OWNER}, TOKEN, auth_date=now)
    for bad in ("", "x" * 5000, signed + "&auth_date=1", "%%%", "a=b=c&&"):
        with pytest.raises(AuthError):
            verify(bad, KEY, max_age_s=DAY, now=now)


def test_webapp_link_prints_a_local_url_the_app_accepts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)  # no .env here
    for name, value in {
        "TELEGRAM_BOT_TOKEN": TOKEN,
        "ALLOWED_USER_IDS": str(OWNER),
        "OPENAI_API_KEY": "sk-test",
        "WEBAPP_LISTEN": "0.0.0.0:8090",
    }.items():
        monkeypatch.setenv(name, value)
    assert main(["webapp-link", str(OWNER), "--dark"]) == 0
    out = capsys.readouterr()
    url = urlsplit(out.out.strip())
    assert (url.scheme, url.netloc, url.path) == ("http", "127.0.0.1:8090", "/")
    params = dict(parse_qsl(url.fragment))
    assert json.loads(params["tgWebAppThemeParams"])["bg_color"] == "#17212b"
    user = verify(params["tgWebAppData"], KEY, max_age_s=DAY, now=time.time())
    assert user.user_id == OWNER
    assert TOKEN not in out.out and TOKEN.split(":")[1] not in out.out + out.err
    monkeypatch.delenv("WEBAPP_LISTEN")
    assert main(["webapp-link", str(OWNER)]) == 2
    assert "WEBAPP_LISTEN" in capsys.readouterr().err
