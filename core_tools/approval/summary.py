"""A readable, bounded, secret-free summary of a tool call's arguments, for the approval prompt."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

MAX_SUMMARY_CHARS = 300
MAX_VALUE_CHARS = 120
MASK = "***"

# Argument names whose values are secrets whatever they look like.
_SECRET_KEY = re.compile(
    r"pass(word|wd|phrase)?|secret|token|api[_-]?key|auth|credential|cookie|private[_-]?key|session",
    re.IGNORECASE,
)
# Values that look like secrets wherever they are: API keys, bearer tokens, JWTs, Telegram bot tokens,
# key=value pairs in URLs and command lines.
_SECRET_VALUE = re.compile(
    r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{8,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{16,}"
    r"|\bxox[abpr]-[A-Za-z0-9-]{8,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+"
    r"|\b\d{6,12}:[A-Za-z0-9_-]{30,}"
    r"|(?i:bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"
)
_SECRET_PAIR = re.compile(
    r"((?:pass(?:word)?|secret|token|api[_-]?key|key|auth)\s*[=:]\s*)([^\s&,;\"']+)", re.IGNORECASE
)


def _mask_text(text: str, secrets: Sequence[str]) -> str:
    for s in secrets:
        if s:
            text = text.replace(s, MASK)
    text = _SECRET_VALUE.sub(MASK, text)
    return _SECRET_PAIR.sub(lambda m: m.group(1) + MASK, text)


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _value(key: str | None, value: Any, secrets: Sequence[str]) -> str:
    if key is not None and _SECRET_KEY.search(key) and value not in (None, "", [], {}):
        return MASK
    if isinstance(value, str):
        return json.dumps(_short(_mask_text(value, secrets), MAX_VALUE_CHARS), ensure_ascii=False)
    if isinstance(value, dict):
        inner = ", ".join(f"{k}: {_value(str(k), v, secrets)}" for k, v in value.items())
        return "{" + _short(inner, MAX_VALUE_CHARS) + "}"
    if isinstance(value, list):
        inner = ", ".join(_value(None, v, secrets) for v in value)
        return "[" + _short(inner, MAX_VALUE_CHARS) + "]"
    return _short(_mask_text(json.dumps(value), secrets), MAX_VALUE_CHARS)


def summarize(arguments: str, secrets: Sequence[str] = ()) -> str:
    """`key: value` pairs of a call's JSON arguments, secrets masked (by argument name, by their look and
    the operator's own `secrets`), each value and the whole cut (at most MAX_SUMMARY_CHARS characters)."""
    try:
        args = json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return _short(_mask_text(arguments, secrets), MAX_SUMMARY_CHARS)
    if isinstance(args, dict):
        text = "\n".join(f"{k}: {_value(str(k), v, secrets)}" for k, v in args.items()) or "(no arguments)"
    else:
        text = _value(None, args, secrets)
    return _short(text, MAX_SUMMARY_CHARS)
