"""Logging to stdout in one readable line per record, with secrets masked everywhere they could appear."""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any
from urllib.parse import quote

from bot.config.secrets import MIN_SECRET_LEN

MASK = "***"


class Redactor:
    """Replaces every known secret (and its URL-encoded form and a bot token's secret half) with ***."""

    def __init__(self, secrets: Iterable[str]) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if len(secret) < MIN_SECRET_LEN:
                continue
            forms.update({secret, quote(secret, safe=""), quote(secret)})
            _, colon, tail = secret.partition(":")
            if colon and len(tail) >= MIN_SECRET_LEN:  # a bot token: the part after the bot id is the secret
                forms.add(tail)
        # longest first, so a secret that contains another is masked whole
        self.secrets = sorted(forms, key=len, reverse=True)

    def mask(self, text: str) -> str:
        """The text with every secret replaced."""
        for s in self.secrets:
            if s in text:
                text = text.replace(s, MASK)
        return text

    def clean(self, record: logging.LogRecord) -> None:
        """Mask the record in place: message and args, the traceback with its exception chain, stack_info."""
        if not self.secrets:
            return
        try:
            message = record.getMessage()
        except Exception:  # a broken format string: logging reports it later; mask what there is
            message = f"{record.msg} {record.args}"
        masked = self.mask(message)
        if masked != message:
            record.msg, record.args = masked, None
        if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
            # Formatted here with its __cause__/__context__ chain (InvalidToken carries the bot token in
            # the exception that caused the one logged); the formatter prints exc_text as it is.
            record.exc_text = "".join(traceback.format_exception(*record.exc_info)).rstrip("\n")
        if record.exc_text:
            masked = self.mask(record.exc_text)
            if masked != record.exc_text:
                # the raw exception goes too: no handler anywhere can format it unmasked again
                record.exc_text, record.exc_info = masked, None
        if record.stack_info:
            record.stack_info = self.mask(record.stack_info)


class RedactSecrets(logging.Filter):
    """A handler filter that masks every known secret in a log record."""

    def __init__(self, secrets: list[str] | Redactor) -> None:
        super().__init__()
        self.redactor = secrets if isinstance(secrets, Redactor) else Redactor(secrets)

    def filter(self, record: logging.LogRecord) -> bool:
        self.redactor.clean(record)
        return True


_base_factory: Callable[..., logging.LogRecord] | None = None


def _install_record_factory(redactor: Redactor) -> None:
    """Mask records when they are made, so handlers added later (by any library) never see a secret."""
    global _base_factory
    if _base_factory is None:
        _base_factory = logging.getLogRecordFactory()
    base = _base_factory

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = base(*args, **kwargs)
        redactor.clean(record)
        return record

    logging.setLogRecordFactory(factory)


def _install_excepthooks(redactor: Redactor) -> None:
    """An exception nobody caught is printed masked too."""

    def print_masked(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        sys.stderr.write(redactor.mask("".join(traceback.format_exception(kind, exc, tb))))

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            print_masked(args.exc_type, args.exc_value, args.exc_traceback)

    sys.excepthook = print_masked
    threading.excepthook = thread_hook


def setup_logging(level: str = "INFO", secrets: list[str] | None = None) -> None:
    """Configure the root logger, masking `secrets` in every record; keep HTTP client logs quiet."""
    redactor = Redactor(secrets or [])
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    handler.addFilter(RedactSecrets(redactor))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    _install_record_factory(redactor)
    _install_excepthooks(redactor)
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
