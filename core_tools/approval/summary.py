"""What a tool call will do, for the approval prompt: every argument in full (a program as its lines), names
and values with nothing that could pass for the prompt's own text, and only real secrets masked.

The user approves what they see, so nothing of what runs may be hidden: no cut here (the front end shows
the first lines and offers the rest), and a mask only over values shaped like credentials (known key
prefixes, long random-looking strings, the operator's own secrets), never over code that merely mentions
`token=`."""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from typing import Any

# The longest call that can be shown for approval (far above any real program): a longer one is not cut
# (what is approved is what is shown) but refused by the gate.
MAX_SUMMARY_CHARS = 200_000
MASK = "***"

# Values that look like secrets wherever they are: API keys with their known prefixes, bearer tokens,
# JWTs, Telegram bot tokens.
_SECRET_VALUE = re.compile(
    r"\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}"
    r"|\bgh[pousr]_[A-Za-z0-9]{16,}"
    r"|\bgithub_pat_[A-Za-z0-9_]{20,}"
    r"|\bglpat-[A-Za-z0-9_-]{16,}"
    r"|\bxox[abpr]-[A-Za-z0-9-]{8,}"
    r"|\bAKIA[0-9A-Z]{16}\b"
    r"|\bAIza[0-9A-Za-z_-]{30,}"
    r"|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+"
    r"|\b\d{6,12}:[A-Za-z0-9_-]{30,}"
    r"|(?i:bearer|basic)\s+[A-Za-z0-9._~+/=-]{16,}"
)
# A credential in a URL's query (`?api_key=...&`): a URL's value, not code that assigns a variable.
_QUERY_SECRET = re.compile(
    r"([?&](?:api[_-]?key|apikey|access[_-]?token|token|key|secret|password|passwd|auth|sig|signature)=)"
    r"([^&#\s\"'<>]+)",
    re.IGNORECASE,
)
# A long run of key-like characters: a secret when it looks random (mixed case and digits, high entropy).
_LONG_TOKEN = re.compile(r"[A-Za-z0-9_+/=-]{32,}")
# Argument names that hold a credential: masked when the value is one word of credential characters
# (a password, a key), never when it could be code or a command (spaces, brackets, quotes, `;`, `$`...).
_SECRET_NAME = re.compile(
    r"pass(word|wd|phrase)?|secret|token|api[_-]?key|credential|private[_-]?key", re.IGNORECASE
)
_CREDENTIAL_WORD = re.compile(r"[A-Za-z0-9._~+/=:@#%^*!?-]{1,500}", re.ASCII)
# A plain argument name is shown as it is; any other (spaces, newlines, quotes, markup) as a JSON string.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_.-]{1,80}", re.ASCII)


def _random_looking(token: str) -> bool:
    if not (re.search(r"[a-z]", token) and re.search(r"[A-Z]", token) and re.search(r"[0-9]", token)):
        return False
    counts = Counter(token)
    entropy = -sum(c / len(token) * math.log2(c / len(token)) for c in counts.values())
    return entropy >= 4.0


def _mask_text(text: str, secrets: Sequence[str]) -> str:
    for s in secrets:
        if s:
            text = text.replace(s, MASK)
    text = _SECRET_VALUE.sub(MASK, text)
    text = _QUERY_SECRET.sub(lambda m: m.group(1) + MASK, text)
    return _LONG_TOKEN.sub(lambda m: MASK if _random_looking(m.group(0)) else m.group(0), text)


def visible(text: str, *, keep_newlines: bool = False) -> str:
    """`text` with every control, format (bidi overrides, zero-width) and line-separating character
    written as an escape: nothing in it can start a line of its own or reorder what is shown around it."""
    out = []
    for ch in text:
        if ch == "\n" and keep_newlines:
            out.append(ch)
        elif ch == "\t":
            out.append("    ")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Co", "Cs"):
            out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else f"\\U{ord(ch):08x}")
        else:
            out.append(ch)
    return "".join(out)


def _masked(key: str | None, value: Any, secrets: Sequence[str]) -> Any:
    """The value with its secrets masked (recursively)."""
    if isinstance(value, str):
        if key is not None and _SECRET_NAME.search(key) and _CREDENTIAL_WORD.fullmatch(value):
            return MASK
        return _mask_text(value, secrets)
    if isinstance(value, dict):
        return {_mask_text(str(k), secrets): _masked(str(k), v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(None, v, secrets) for v in value]
    return value


def _name(key: str) -> str:
    return key if _PLAIN_NAME.fullmatch(key) else visible(json.dumps(key, ensure_ascii=False))


def _entry(key: str, value: Any) -> str:
    name = _name(key)
    if isinstance(value, str) and "\n" in value.strip("\n"):
        # A program or a text of several lines: shown as its lines, each indented under its name, so no
        # line of it can pass for another argument.
        lines = visible(value.strip("\n"), keep_newlines=True).split("\n")
        return f"{name}: |\n" + "\n".join(f"  {line}" for line in lines)
    return f"{name}: {visible(json.dumps(value, ensure_ascii=False))}"


def summarize(arguments: str, secrets: Sequence[str] = ()) -> str:
    """Every argument of a call's JSON arguments as `name: value` lines (a value of several lines as its
    lines, indented), secrets masked: by their look and the operator's own `secrets`."""
    try:
        args = _masked(None, json.loads(arguments or "{}"), secrets)
        if isinstance(args, dict):
            return "\n".join(_entry(str(k), v) for k, v in args.items()) or "(no arguments)"
        return visible(json.dumps(args, ensure_ascii=False))
    except (ValueError, RecursionError):  # not JSON, or nested too deep to walk: shown as it came
        return visible(_mask_text(arguments, secrets), keep_newlines=True)
