"""Logging to stdout in one readable line per record, with secrets masked."""

from __future__ import annotations

import logging
import sys


class RedactSecrets(logging.Filter):
    """Replaces every known secret in a log record with ***."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self.secrets = [s for s in secrets if s]

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if any(s in message for s in self.secrets):
            for s in self.secrets:
                message = message.replace(s, "***")
            record.msg, record.args = message, None
        return True


def setup_logging(level: str = "INFO", secrets: list[str] | None = None) -> None:
    """Configure the root logger; keep HTTP client logs quiet (Bot API URLs contain the token)."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    handler.addFilter(RedactSecrets(secrets or []))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    noisy_loggers = (
        "httpx",
        "httpx2",
        "httpcore",
        "openai",
        "telegram.ext.Updater",
        "apscheduler",
        "alembic.runtime.plugins",
    )
    for noisy in noisy_loggers:
        logging.getLogger(noisy).setLevel(logging.WARNING)
