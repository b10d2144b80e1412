"""Secrets never reach the logs: messages, arguments, tracebacks with chains, stack info, any handler."""

from __future__ import annotations

import io
import logging
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from telegram.error import InvalidToken

from bot.config.secrets import secret_values
from bot.config.settings import Settings
from bot.process.logs import setup_logging

TOKEN = "123456:SECRET-token-value"


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """setup_logging changes process-wide state: put it back for the other tests."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    factory, hook, thread_hook = logging.getLogRecordFactory(), sys.excepthook, threading.excepthook
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    logging.setLogRecordFactory(factory)
    sys.excepthook, threading.excepthook = hook, thread_hook


def test_secrets_are_masked_in_every_log_line(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("DEBUG", [TOKEN, "sk-very-secret"])
    log = logging.getLogger("some.module")
    log.info("calling https://api.telegram.org/bot%s/getMe", TOKEN)
    log.warning("key is sk-very-secret")
    out = capsys.readouterr().out
    assert TOKEN not in out and "sk-very-secret" not in out
    assert "bot***/getMe" in out and "key is ***" in out
    assert logging.getLogger("httpx").level == logging.WARNING


def test_tracebacks_chains_and_stack_info_are_masked_for_every_handler(
    capsys: pytest.CaptureFixture[str],
) -> None:
    setup_logging("DEBUG", [TOKEN, "whsec-0123456789"])
    late = io.StringIO()  # a handler a library adds after start-up, with no filter of ours
    late_handler = logging.StreamHandler(late)
    late_handler.setFormatter(logging.Formatter("%(message)s"))
    logging.getLogger("telegram.ext").addHandler(late_handler)
    try:
        try:
            try:
                raise InvalidToken("Unauthorized")
            except InvalidToken as exc:
                raise InvalidToken(f"The token `{TOKEN}` was rejected by the server.") from exc
        except InvalidToken:
            logging.getLogger("telegram.ext").exception("bootstrap failed")
        try:
            raise ValueError("context")
        except ValueError:
            try:
                raise RuntimeError(f"url-encoded {TOKEN.replace(':', '%3A')}")
            except RuntimeError:
                logging.getLogger("httpx").error("during handling", exc_info=True, stack_info=True)
        logging.getLogger("apscheduler.scheduler").warning("job args %r", {"secret": "whsec-0123456789"})
        logging.getLogger("openai").warning("only the secret half %s", TOKEN.split(":")[1])
    finally:
        logging.getLogger("telegram.ext").removeHandler(late_handler)
    out = capsys.readouterr().out + late.getvalue()
    assert "rejected by the server" in out and "The above exception was the direct cause" in out
    assert "url-encoded ***" in out and "Stack (most recent call last)" in out
    assert "job args {'secret': '***'}" in out and "only the secret half ***" in out
    for leaked in (TOKEN, TOKEN.split(":")[1], "whsec-0123456789", TOKEN.replace(":", "%3A")):
        assert leaked not in out


def test_uncaught_exceptions_are_printed_masked(capsys: pytest.CaptureFixture[str]) -> None:
    setup_logging("INFO", [TOKEN])
    try:
        raise InvalidToken(f"The token `{TOKEN}` was rejected by the server.")
    except InvalidToken as exc:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    err = capsys.readouterr().err
    assert "The token `***` was rejected" in err and TOKEN not in err


def test_every_secret_setting_is_masked_without_a_hand_made_list(tmp_path: Path) -> None:
    values: dict[str, Any] = {
        name: f"value-of-{name}-0123"
        for name, field in Settings.model_fields.items()
        if "SecretStr" in str(field.annotation) or name.endswith(("_key", "_token", "_secret"))
    }
    values["telegram_bot_token"] = TOKEN
    values["telegram_webhook_secret"] = "whsec-0123456789"
    values["searxng_url"] = "https://me:searx-password@search.example.com/"
    values["alert_webhook_url"] = "https://hooks.example.com/services/T0123/B0123/hook-secret"
    assert {"telegram_bot_token", "telegram_webhook_secret", "openai_api_key", "embeddings_api_key"} <= set(
        values
    )
    settings = Settings(_env_file=None, **values)  # type: ignore[call-arg]
    found = set(secret_values(settings))
    assert set(values.values()) - {values["searxng_url"]} <= found
    assert "searx-password" in found
    assert settings.secrets() == secret_values(settings)
