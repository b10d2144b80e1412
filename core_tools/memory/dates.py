"""Periods named in a recall query ("last June", "in March 2025", "yesterday", "3 weeks ago"), as UTC ranges.

dateparser finds and resolves the expression (relative to now in the user's time zone, preferring the past:
"June" asked in January is last June); its period (day / week / month / year) gives the range's width. A few
phrasings it does not know (weekends, seasons, "the last few days") are matched here first. Words that look
like dates but rarely are in a question ("may", "second", "now", a lone weekday abbreviation) are rejected.
"""

from __future__ import annotations

import logging
import re
import threading
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any

log = logging.getLogger(__name__)

_MONTHS = re.findall(
    r"\w+", "january february march april may june july august september october november december"
)
_MONTH_RE = "|".join(_MONTHS) + "|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec"
# What a matched expression must contain to be taken as a date (dateparser also matches "now", "second", ...).
_DATE_WORD = re.compile(
    r"\d|\b(" + _MONTH_RE + r"|yesterday|today|tonight|ago|last|this|week|month|year|monday|tuesday"
    r"|wednesday|thursday|friday|saturday|sunday)\b",
    re.IGNORECASE,
)
# "may" is a month only next to a number or after in/on/last/this/since/early/late/mid/of.
_BARE_MAY = re.compile(r"^\s*may\s*$", re.IGNORECASE)
_MAY_AS_MONTH = re.compile(r"\b(in|on|last|this|since|early|late|mid|of)\s+may\b|\bmay\s+\d", re.IGNORECASE)
_SEASONS = {"spring": (3, 6), "summer": (6, 9), "autumn": (9, 12), "fall": (9, 12), "winter": (12, 15)}
_SEASON = re.compile(
    r"\b(?:(last|this)\s+)?(spring|summer|autumn|fall|winter)(?:\s+(?:of\s+)?(\d{4}))?\b", re.IGNORECASE
)
_WEEKEND = re.compile(r"\b(last|this|past)\s+weekend\b", re.IGNORECASE)
_FEW_DAYS = re.compile(
    r"\b(?:the\s+)?(?:last|past)\s+(few|couple\s+of|several|\d+)\s+days\b|\brecently\b", re.IGNORECASE
)


@dataclass(frozen=True)
class Period:
    """A half-open range [start, end) in UTC (aware datetimes), and the words of the query that named it."""

    start: datetime
    end: datetime
    words: str


_parser_lock = threading.Lock()
_search: Any = None
_DDP: Any = None


def _dateparser() -> tuple[Any, Any]:
    # Imported on first use (about 0.6 s and a few MB of language data); one parser per process.
    global _search, _DDP
    with _parser_lock:
        if _search is None:
            from dateparser.date import DateDataParser
            from dateparser.search import search_dates

            _DDP = DateDataParser(languages=["en"])
            _search = search_dates
    return _search, _DDP


def ready() -> bool:
    """Whether dateparser is loaded (before that, a first search costs most of a second)."""
    return _search is not None


def warm_up() -> None:
    """Load dateparser now (its first search costs ~0.1 s) instead of in a user's turn."""
    find_period("what did I do last June", datetime.now(UTC), UTC)


def _local_range(lo: date, hi: date, tz: tzinfo, words: str) -> Period:
    start = datetime.combine(lo, time(0), tzinfo=tz).astimezone(UTC)
    end = datetime.combine(hi, time(0), tzinfo=tz).astimezone(UTC)
    return Period(start, end, words)


def _month_after(d: date) -> date:
    return date(d.year + (d.month == 12), d.month % 12 + 1, 1)


def _own_patterns(query: str, local_now: datetime, tz: tzinfo) -> Period | None:
    today = local_now.date()
    m = _WEEKEND.search(query)
    if m:
        # The last Saturday-Sunday that has started ("this weekend" on a Saturday is today and tomorrow).
        saturday = today - timedelta(days=(today.weekday() - 5) % 7)
        if m.group(1).lower() != "this" and saturday == today:
            saturday -= timedelta(days=7)
        return _local_range(saturday, saturday + timedelta(days=2), tz, m.group(0))
    m = _FEW_DAYS.search(query)
    if m:
        n = m.group(1)
        days = int(n) if n and n.isdigit() else 7 if m.group(0).lower() == "recently" else 5
        start = datetime.combine(today - timedelta(days=days), time(0), tzinfo=tz).astimezone(UTC)
        return Period(start, local_now.astimezone(UTC) + timedelta(minutes=1), m.group(0))
    m = _SEASON.search(query)
    if m:
        which, season, year = m.group(1), m.group(2).lower(), m.group(3)
        first, last = _SEASONS[season]
        if year:
            y = int(year)
        else:
            # The most recent such season that has begun ("last summer" in January is the year before).
            y = today.year if today >= date(today.year, first, 1) else today.year - 1
            if which and which.lower() == "last" and today < date(y + (last > 12), (last - 1) % 12 + 1, 1):
                y -= 1
        lo = date(y, first, 1)
        hi = date(y + (last > 12), (last - 1) % 12 + 1, 1)
        return _local_range(lo, hi, tz, m.group(0))
    return None


# A day number alone ("my 18th birthday", "the 2nd time") is not a date: dateparser takes it for that day of
# the current month.
_LONE_DAY = re.compile(r"^\W*(?:(?:on|the|of)\s+)*\d{1,2}(?:st|nd|rd|th)?\W*$", re.IGNORECASE)


def _acceptable(words: str, query: str) -> bool:
    if not _DATE_WORD.search(words) or _LONE_DAY.match(words):
        return False
    return not (_BARE_MAY.match(words) and not _MAY_AS_MONTH.search(query))


# A query without any of these words names no period, and dateparser is not asked (most messages).
_MAYBE_DATE = re.compile(
    r"\d|\b(" + _MONTH_RE + r"|yesterday|today|tonight|ago|week|weekend|month|year|days|recently"
    r"|spring|summer|autumn|fall|winter|monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b",
    re.IGNORECASE,
)


def find_period(query: str, now: datetime, tz: tzinfo) -> Period | None:
    """The period a query names, relative to `now` in time zone `tz`; None when it names none."""
    # A long message is not a date question, and dateparser's time grows with the text.
    if not query or len(query) > 500 or not _MAYBE_DATE.search(query):
        return None
    local_now = now.astimezone(tz)
    own = _own_patterns(query, local_now, tz)
    if own is not None:
        return own
    search, ddp = _dateparser()
    base = local_now.replace(tzinfo=None)
    settings = {"RELATIVE_BASE": base, "PREFER_DATES_FROM": "past", "RETURN_AS_TIMEZONE_AWARE": False}
    try:
        found = search(query, languages=["en"], settings=settings) or []
    except Exception:  # a parser failure only loses the date hint
        log.debug("dateparser failed on a query", exc_info=True)
        return None
    named: list[tuple[str, date, str]] = []
    for words, when in found:
        if not _acceptable(words, query):
            continue
        try:
            data = ddp.get_date_data(words)
            kind = data.period if data and data.date_obj else "day"
        except Exception:
            kind = "day"
        if re.search(r"\bdays?\s+ago\b|yesterday|today|tonight", words, re.IGNORECASE):
            kind = "day"
        named.append((kind, when.date(), words))
    # "in January of last year": dateparser resolves "January" alone; the year named beside it decides.
    years = {day.year for kind, day, _ in named if kind == "year"}
    periods: list[Period] = []
    for kind, day, words in named:
        if kind in ("month", "day") and len(years) == 1 and day.year not in years:
            try:
                day = day.replace(year=next(iter(years)))
            except ValueError:  # 29 February
                day = day.replace(year=next(iter(years)), day=28)
        if kind == "year":
            periods.append(_local_range(date(day.year, 1, 1), date(day.year + 1, 1, 1), tz, words))
        elif kind == "month":
            first = date(day.year, day.month, 1)
            periods.append(_local_range(first, _month_after(first), tz, words))
        elif kind == "week":
            monday = day - timedelta(days=day.weekday())
            periods.append(_local_range(monday, monday + timedelta(days=7), tz, words))
        else:
            periods.append(_local_range(day, day + timedelta(days=1), tz, words))
    if not periods:
        return None
    # "in July last year": the narrowest period named ("July" of the year meant, as dateparser resolved it).
    return min(periods, key=lambda p: p.end - p.start)


def without_period(query: str, period: Period) -> str:
    """The query with the words that named the period taken out ("what did I do in June" -> "what did I do"):
    the date is matched by the row's date, and its words would pull the query's vector toward any text that
    mentions a month or a year."""
    rest = re.sub(r"\s+", " ", query.replace(period.words, " ")).strip(" ,.;")
    return rest if any(ch.isalnum() for ch in rest) else query


# Words that say nothing about *what* is asked in "what did I do last June", "anything notable from March?",
# "remind me what I was up to in May": with only these (and the date's), the question asks for the period.
_VAGUE = frozenset(
    re.findall(
        r"\w+",
        """do did done doing happen happened happening up event events anything something notable
        remind tell told talk talked say said go going went on was were get got new last this next past
        year years month months week weeks weekend day days ago yesterday today tonight few couple
        recently early late mid spring summer autumn fall winter monday tuesday wednesday thursday
        friday saturday sunday one two three four five six seven eight nine ten eleven twelve several
        jan feb mar apr jun jul aug sep sept oct nov dec""",
    )
    + _MONTHS
)
_WORDS = re.compile(r"[^\W_]+", re.UNICODE)


def asks_only_for_period(query: str, stopwords: frozenset[str]) -> bool:
    """Whether the query names a period and nothing else ("what did I do last June?")."""
    words = [w for w in _WORDS.findall(query.lower()) if not w.isdigit()]
    return not [w for w in words if w not in stopwords and w not in _VAGUE]
