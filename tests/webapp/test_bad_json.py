"""Bad JSON gets 400 with a short reason, never 500 and never a traceback in the log (issue 31 §10): over real
HTTP against the real bot, with a memory whose text must stay as it was."""

from __future__ import annotations

import hashlib
import hmac
import logging
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest

from bot.webapp.api import MAX_DEPTH
from bot.webapp.auth import data_check_string, secret_key
from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, TOKEN, running_bot
from tests.webapp.client import AppClient, init_data

pytestmark = pytest.mark.slow  # a bot process

DEEP = 5000
BODIES: dict[str, tuple[bytes, str]] = {
    # what is sent -> a word of the reason the answer gives
    "nested 5,000 deep (a list)": (
        b'{"content": ' + b"[" * DEEP + b"]" * DEEP + b"}",
        f"deeper than {MAX_DEPTH}",
    ),
    "nested 3,000 deep (objects)": (b'{"":' * 3000 + b"1" + b"}" * 3000, f"deeper than {MAX_DEPTH}"),
    "nested just past the bound": (
        b'{"content": ' + b"[" * MAX_DEPTH + b"]" * MAX_DEPTH + b"}",
        f"deeper than {MAX_DEPTH}",
    ),
    "a lone surrogate in the text": (b'{"content": "remember \\ud800 this"}', "lone surrogate"),
    "a lone low surrogate in a key": (b'{"content": "x", "\\udfff": 1}', "lone surrogate"),
    "invalid UTF-8": (b'{"content": "caf\xe9"}', "not UTF-8"),
    "a surrogate encoded as UTF-8 bytes": (b'{"content": "\xed\xa0\x80"}', "not UTF-8"),
    "UTF-16": ('{"content": "x"}'.encode("utf-16"), "not UTF-8"),
    "a list at the top": (b'["content", "x"]', "must be a JSON object"),
    "a string at the top": (b'"x"', "must be a JSON object"),
    "null": (b"null", "must be a JSON object"),
    "a number at the top": (b"7", "must be a JSON object"),
    "not JSON": (b"{content: x}", "not JSON"),
    "an empty body": (b"", "not JSON"),
    "NaN": (b'{"content": NaN}', "not JSON"),
    "a 5,000-digit number": (b'{"content": ' + b"9" * 5000 + b"}", "not JSON"),
}


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.exc_info is not None or r.levelno >= logging.ERROR]


def _signed_raw_user(user_json: str) -> str:
    """Init data whose `user` field is this exact JSON text, signed with the bot's token."""
    fields = {"auth_date": str(int(time.time())), "user": user_json}
    fields["hash"] = hmac.new(
        secret_key(TOKEN), data_check_string(fields).encode(), hashlib.sha256
    ).hexdigest()
    return urlencode(fields)


async def test_bad_json_gets_400_with_a_short_reason_and_no_traceback(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with running_bot(tmp_path, tg, llm, webapp_listen="127.0.0.1:0") as h:
        stored = await h.services.memory.store(OWNER, "long", "Unchanged words", dedupe=False)
        memory_id = stored["memory"]["id"]
        async with AppClient(h.app_url, init_data(OWNER)) as client:
            wrong = {}  # every case is tried; the assert names all that went wrong
            for case, (raw, reason) in BODIES.items():
                status, answer = await client.call(
                    "PATCH",
                    f"/api/memories/{memory_id}",
                    data=raw,
                    headers={"Content-Type": "application/json"},
                )
                error = str((answer or {}).get("error"))
                if status != 400 or reason not in error or len(error) > 100:
                    wrong[case] = (status, error)
            assert wrong == {}
            # A lone surrogate in the query string or the path is no error either.
            for path in (
                "/api/memories?q=%ED%A0%80",
                "/api/memories?q=%5Cud800",
                "/api/memories?layer=%ED%A0%80",
                "/api/memories/%ED%A0%80/history",
                "/api/code_runs/%ED%A0%80",
            ):
                status, answer = await client.call("GET", path)
                assert status in (200, 400, 404), (path, status, answer)
            listing = await client.ok("GET", "/api/memories")
            assert [m["content"] for m in listing["memories"]] == ["Unchanged words"]
            # A good body still works.
            edited = await client.ok("PATCH", f"/api/memories/{memory_id}", {"content": "New words 😀"})
            assert edited["memory"]["content"] == "New words 😀"
        # Telegram-signed launch data whose user's name is a lone surrogate, or nested deep.
        for user_json in (
            f'{{"id": {OWNER}, "first_name": "\\ud800"}}',
            f'{{"id": {OWNER}, "first_name": ' + "[" * 600 + "]" * 600 + "}",  # as deep as 4 KB holds
        ):
            async with AppClient(h.app_url, _signed_raw_user(user_json)) as odd:
                status, answer = await odd.call("GET", "/api/me")
                assert status in (200, 401), (status, answer)
                if status == 200:
                    assert answer["user"]["id"] == OWNER and answer["user"]["first_name"] is None
    assert _tracebacks(caplog) == []
