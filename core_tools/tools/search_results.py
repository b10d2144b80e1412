"""Search results as the model sees them: tracking parameters dropped, duplicates collapsed, text bounded."""

from __future__ import annotations

import email.utils
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from core_tools.tools.search_providers.base import RawResult, SearchType
from core_tools.tools.web import html_to_text

SNIPPET_CHARS = 300
TITLE_CHARS = 200

# Query parameters that only identify a click or campaign; dropping them lets duplicates collapse.
_TRACKING_PARAMS = frozenset(
    {
        "fbclid",
        "gclid",
        "dclid",
        "gbraid",
        "wbraid",
        "msclkid",
        "yclid",
        "twclid",
        "igshid",
        "mc_cid",
        "mc_eid",
        "_hsenc",
        "_hsmi",
        "mkt_tok",
        "oly_enc_id",
        "oly_anon_id",
        "vero_id",
        "ref_src",
        "_ga",
        "__hstc",
        "__hssc",
        "__hsfp",
        "s_cid",
        "ncid",
    }
)


def _is_tracking(key: str) -> bool:
    k = unquote(key).lower()
    return k.startswith("utm_") or k in _TRACKING_PARAMS


def clean_url(url: str) -> str:
    """Return `url` without tracking parameters and fragment (the form shown to the model)."""
    parts = urlsplit(url.strip())
    # Filter the raw "k=v" pairs rather than parse and re-encode, so the kept ones stay byte-identical.
    kept = [p for p in parts.query.split("&") if p and not _is_tracking(p.partition("=")[0])]
    return urlunsplit((parts.scheme, parts.netloc, parts.path, "&".join(kept), ""))


def url_key(url: str) -> str:
    """Return the dedup key of `url`: scheme-less, lowercase host, no default port or trailing slash."""
    parts = urlsplit(clean_url(url))
    host = (parts.hostname or "").lower()
    port = parts.port if parts.port not in (None, 80, 443) else None
    path = parts.path.rstrip("/")
    query = "&".join(sorted(p for p in parts.query.split("&") if p))
    return f"{host}{':' + str(port) if port else ''}{path}{'?' + query if query else ''}"


def bound_text(text: str, limit: int) -> str:
    """Cut `text` to at most about `limit` characters on a word boundary, marking the cut with an ellipsis."""
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(" ", 1)[0] if " " in text[:limit] else text[:limit]
    return cut.rstrip(" ,;:.-") + "…"


def parse_date(value: Any) -> str | None:
    """Return `value` (ISO 8601, RFC 2822 or epoch seconds) as ISO 8601 in UTC, or None if unparseable."""
    dt: datetime | None = None
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            dt = datetime.fromtimestamp(float(value), tz=UTC)
        except (OverflowError, OSError, ValueError):
            return None
    elif isinstance(value, str) and value.strip():
        text = value.strip()
        try:
            dt = datetime.fromisoformat(text)
        except ValueError:
            try:
                dt = email.utils.parsedate_to_datetime(text)
            except (TypeError, ValueError, IndexError):
                return None
    if dt is None:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)  # providers that omit the zone report UTC
    return dt.astimezone(UTC).isoformat()


def normalise_results(
    raw: Iterable[RawResult], *, source: str, type: SearchType, max_results: int
) -> list[dict[str, Any]]:
    """Clean, deduplicate, (for news) date-sort and cut provider results to the shape the model sees."""
    seen: set[str] = set()
    out: list[dict[str, Any]] = []
    for item in raw:
        if not isinstance(item.url, str) or urlsplit(item.url.strip()).scheme not in ("http", "https"):
            continue
        key = url_key(item.url)
        if key in seen:
            continue
        seen.add(key)
        url = clean_url(item.url)
        title = bound_text(html_to_text(str(item.title or "")), TITLE_CHARS) or url
        entry: dict[str, Any] = {
            "title": title,
            "url": url,
            "snippet": bound_text(html_to_text(str(item.snippet or "")), SNIPPET_CHARS),
        }
        date = parse_date(item.published)
        if date is not None:
            entry["date"] = date
        entry["source"] = source
        out.append(entry)
        if type != "news" and len(out) >= max_results:
            break  # web keeps provider order, so the rest would be cleaned only to be cut off
    if type == "news":
        # Stable sort: dated results newest first, undated ones after them in provider order.
        out.sort(key=lambda r: (0, _neg_ts(r["date"])) if "date" in r else (1, 0.0))
    return out[:max_results]


def _neg_ts(iso: str) -> float:
    return -datetime.fromisoformat(iso).timestamp()
