"""Memory that checks itself: can recall find each of a user's memories by a short cue of its own words?

A check of one user (nightly under a job lease, bot/runtime/memory_check.py; on demand, `python -m bot
memory-check [USER]`) first repairs what would hide a memory from recall, on the spot:
- rows without a vector, with a vector of another embedder than the current one, or (SQLite) missing from
  the bit-vector index: embedded again with the current embedder;
- rows whose keyword-index words are missing or stale (SQLite's FTS5; PostgreSQL's words are generated from
  the content and cannot go stale: db/memory_check.py): written again.
Then it asks the real recall path (MemoryStore.recall, the user's settings and weights) for every current
memory by its cue and counts the memories that come back in the top FINDABLE_TOP: "findable", in percent.

The cue is the memory's first CUE_WORDS content words, in their order (stopwords left out): what one would
type to look for it, taken from its own text, so a miss is the index's fault or a near-duplicate's (a
memory whose first words many others share cannot be told apart by them), never a paraphrase's. The
keywords by rarity were the other choice; they need the index's own statistics, so the cue would be fitted
to the keyword search it checks. Stopwords go so that "The user is a keen ..." is not asked as "the user is".

No LLM. The query vectors are embedded in batches first (QUERY_BATCH at a time, one model call each) and
handed to recall through a store that answers its query embeddings from them; then each recall is the one
a turn makes. The result is one row per user (db.models.MemoryCheck): /memory and the app show it, and the
owner is told once per fall below THRESHOLD (the bot's job).
"""

from __future__ import annotations

import copy
import functools
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from core_tools.memory.embedders import Embedder
from core_tools.memory.embedding import MemoryEmbedding, in_worker, source_text
from core_tools.memory.passage import index_id
from core_tools.memory.store import MemoryStore
from db import memory_check as mc
from db import memory_vectors
from db.memory_check import StoredCheck
from db.memory_words import STOPWORDS, fts_words
from db.models import utcnow

log = logging.getLogger(__name__)

CUE_WORDS = 6
FINDABLE_TOP = 5
THRESHOLD = 95.0  # percent: below it the owner is told (once per fall)
QUERY_BATCH = 64
# The nightly check asks recall for this many of a user's memories (a fresh draw each night), the on-demand
# one for all: a memory asked costs about 8 ms on these 2 cores (the query vectors embedded in batches;
# `bench/bench_memory_locomo.py --selfcheck`: 2,759 real turns in 21 s), so a full check of 10k memories
# takes more than a minute, a night's sample about one second a user. The repairs cover every row.
NIGHTLY_SAMPLE = 100
PASSAGE_BATCH = 64


def cue(content: str) -> str:
    """The memory's first CUE_WORDS content words, in order (its first words when it has no content word)."""
    words = fts_words(content)
    kept = [w for w in words if w not in STOPWORDS and (len(w) > 1 or w.isdigit())]
    return " ".join((kept or words)[:CUE_WORDS]) or content.strip()[:80]


def plural(n: int, one: str, many: str) -> str:
    """ "1 keyword row", "2 keyword rows"."""
    return f"{n} {one if n == 1 else many}"


@dataclass(frozen=True)
class CheckResult:
    """One user's check: how many current memories were asked for, how many were found, what was repaired."""

    user_id: int
    memories: int
    findable: int
    repaired_vectors: int
    repaired_words: int
    seconds: float
    checked_at: datetime
    missed: tuple[str, ...] = ()  # ids of the memories not found (a few, for the log)
    current: int | None = None  # the user's current memories, when only a sample of them was asked for

    @property
    def percent(self) -> float:
        """Findable memories in percent (100 when there were none to find)."""
        return 100.0 * self.findable / self.memories if self.memories else 100.0

    def line(self) -> str:
        """The one line `python -m bot memory-check` prints for the user."""
        repairs = []
        if self.repaired_vectors:
            repairs.append(plural(self.repaired_vectors, "without a vector", "without a vector"))
        if self.repaired_words:
            repairs.append(plural(self.repaired_words, "keyword row", "keyword rows"))
        repaired = f"repaired {', '.join(repairs)}" if repairs else "repaired nothing"
        of = f"{self.findable} of {self.memories}"
        if self.current is not None and self.current > self.memories:
            of += f" asked, a sample of {self.current}"
        return (
            f"user {self.user_id}: findable {self.percent:.1f} % ({of}), {repaired}; "
            f"checked in {self.seconds:.1f} s"
        )


def findable_line(check: StoredCheck | None) -> str | None:
    """What /memory and the app show: "findable: 99.6 %, checked 2026-12-02" (None before a check)."""
    if check is None:
        return None
    return f"findable: {check.percent:.1f} %, checked {check.checked_at:%Y-%m-%d}"


def _store_vectors(pairs: list[tuple[int, list[float]]], embedder_id: str, s: Session) -> None:
    memory_vectors.store_vectors(s, pairs, embedder_id)


class _Prefetched:
    """An embedder whose query vectors for known texts were embedded ahead in batches (others: `inner`)."""

    def __init__(self, inner: Embedder, vectors: dict[str, list[float]]) -> None:
        self.inner = inner
        self.id = inner.id
        self.dim = inner.dim
        self.vectors = vectors

    async def embed_query(self, text: str, *, user_id: int | None = None) -> list[float]:
        found = self.vectors.get(text)
        return list(found) if found is not None else await self.inner.embed_query(text, user_id=user_id)

    async def embed_passages(self, texts: list[str], *, user_id: int | None = None) -> list[list[float]]:
        return await self.inner.embed_passages(texts, user_id=user_id)


async def query_vectors(
    emb: Embedder, texts: Sequence[str], batch: int = QUERY_BATCH
) -> dict[str, list[float]]:
    """Query vectors of `texts`, a batch per model call when the embedder can (`embed_queries`), else one by
    one; a failure leaves the rest out (recall then embeds those itself, or falls back to keywords)."""
    distinct = list(dict.fromkeys(texts))
    out: dict[str, list[float]] = {}
    many: Callable[..., Any] | None = getattr(emb, "embed_queries", None)
    try:
        for start in range(0, len(distinct), batch):
            chunk = distinct[start : start + batch]
            if many is not None:
                vectors = await many(chunk)
            else:
                vectors = [await emb.embed_query(t) for t in chunk]
            out.update(zip(chunk, vectors, strict=True))
    except Exception as exc:  # the check goes on: recall embeds what is missing as a turn would
        log.warning("memory check: query embedding stopped after %d cues: %r", len(out), exc)
    return out


class MemorySelfCheck:
    """Repairs and measures each user's memories through `store`'s own recall; stores the result."""

    def __init__(
        self,
        store: MemoryStore,
        sessions: sessionmaker[Session],
        *,
        now: Callable[[], datetime] = utcnow,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.store = store
        self._sessions = sessions
        self.now = now
        self.clock = clock

    async def _db(self, fn: Callable[[Session], Any]) -> Any:
        return await in_worker(self._sessions, fn)

    async def users(self) -> list[int]:
        """Every user who has memories."""
        users: list[int] = await self._db(mc.users_with_memories)
        return users

    async def last(self, user_id: int) -> StoredCheck | None:
        """The user's last stored check."""
        found: StoredCheck | None = await self._db(lambda s: mc.last_check(s, user_id))
        return found

    async def all_checks(self) -> list[StoredCheck]:
        """Every user's last stored check."""
        found: list[StoredCheck] = await self._db(mc.all_checks)
        return found

    async def set_told(self, user_id: int, told: bool) -> None:
        """Record that the owner was told (or is no longer to be reminded) of the user's fall."""
        await self._db(lambda s: mc.set_told_below(s, user_id, told))

    async def repair_vectors(self, user_id: int, emb: Embedder | None) -> int:
        """Embed the user's rows that have no usable vector with the current embedder; how many were."""
        if emb is None:  # no embedder, or one that does not fit the vector table (the start-up reembed's)
            return 0
        target = index_id(emb.id)
        rows = await self._db(lambda s: mc.rows_without_vector(s, user_id, target))
        done = 0
        for start in range(0, len(rows), PASSAGE_BATCH):
            chunk = rows[start : start + PASSAGE_BATCH]
            try:  # a maintenance job, not the user's request: accounted without a user (as reembed)
                vectors = await emb.embed_passages([source_text(r) for r in chunk])
            except Exception as exc:  # the rows keep working by keyword; the next check tries again
                log.warning(
                    "memory check of user %s: re-embedding stopped at %d rows: %r", user_id, done, exc
                )
                break
            pairs = [(r.id, v) for r, v in zip(chunk, vectors, strict=True)]
            await self._db(functools.partial(_store_vectors, pairs, target))
            done += len(chunk)
        return done

    async def repair_words(self, user_id: int) -> int:
        """Write again the keyword-index words of the user's rows whose words are missing or stale."""

        def work(s: Session) -> int:
            rows = mc.stale_word_rows(s, user_id)
            mc.rewrite_words(s, user_id, rows)
            return len(rows)

        done: int = await self._db(work)
        return done

    def _recalling(self, vectors: dict[str, list[float]], emb: Embedder | None) -> MemoryStore:
        """The store as it is (weights, depths, time zones), answering query embeddings from `vectors`."""
        if emb is None:
            return self.store
        clone = copy.copy(self.store)
        clone.embedding = MemoryEmbedding(self._sessions, _Prefetched(emb, vectors))
        return clone

    async def check_user(self, user_id: int, sample: int | None = None) -> CheckResult:
        """Repair the user's rows, then ask recall for each current memory by its cue (or for `sample` of
        them, drawn afresh each day); stores the result."""
        started = self.clock()
        emb = await self.store.embedding.usable()
        vectors_fixed = await self.repair_vectors(user_id, emb)
        words_fixed = await self.repair_words(user_id)
        now = self.now()
        memories: list[tuple[str, str]] = await self._db(lambda s: mc.current_memories(s, user_id, now))
        current = len(memories)
        if sample is not None and current > sample:
            # Each day another draw: over the nights every memory is asked for, at a bounded cost a night.
            memories = random.Random(f"{user_id}:{now:%Y-%m-%d}").sample(memories, sample)
        cues = [cue(content) for _, content in memories]
        vectors = await query_vectors(emb, cues) if emb is not None else {}
        store = self._recalling(vectors, emb)
        missed: list[str] = []
        for (memory_id, _), text_ in zip(memories, cues, strict=True):
            hits = await store.recall(user_id, text_, limit=FINDABLE_TOP)
            if not any(h["id"] == memory_id for h in hits):
                missed.append(memory_id)
        result = CheckResult(
            user_id=user_id,
            memories=len(memories),
            findable=len(memories) - len(missed),
            repaired_vectors=vectors_fixed,
            repaired_words=words_fixed,
            seconds=self.clock() - started,
            checked_at=self.now(),
            missed=tuple(missed[:20]),
            current=current,
        )

        def save(s: Session) -> None:
            stored = mc.save_check(
                s,
                user_id,
                checked_at=result.checked_at,
                memories=result.memories,
                findable=result.findable,
                repaired_vectors=result.repaired_vectors,
                repaired_words=result.repaired_words,
                seconds=result.seconds,
            )
            if stored.told_below and stored.percent >= THRESHOLD:  # back up: the next fall is told again
                mc.set_told_below(s, user_id, False)

        await self._db(save)
        if missed:
            log.info(
                "memory check of user %s: not findable by its cue: %s",
                user_id,
                ", ".join(missed[:20]),
            )
        return result

    async def check_all(self, users: Sequence[int] | None = None) -> list[CheckResult]:
        """Check `users` (default: everyone with memories), one after another."""
        return [await self.check_user(u) for u in (users if users is not None else await self.users())]

    async def falls_to_tell(self) -> list[StoredCheck]:
        """Users whose stored figure is below THRESHOLD and whose fall the owner was not told of yet."""
        return [
            c for c in await self.all_checks() if c.memories and c.percent < THRESHOLD and not c.told_below
        ]
