"""Secrets never reach the logs."""

from __future__ import annotations

import logging

import pytest

from bot.logs import setup_logging


def test_secrets_are_masked_in_every_log_line(capsys: pytest.CaptureFixture[str]) -> None:
    token = "123456:SECRET-token-value"
    setup_logging("DEBUG", [token, "sk-very-secret"])
    log = logging.getLogger("some.module")
    log.info("calling https://api.telegram.org/bot%s/getMe", token)
    log.warning("key is sk-very-secret")
    out = capsys.readouterr().out
    assert token not in out and "sk-very-secret" not in out
    assert "bot***/getMe" in out and "key is ***" in out
    assert logging.getLogger("httpx").level == logging.WARNING
