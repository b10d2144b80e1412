"""Reading layered memories: hybrid recall (keywords, vector and the period a query names), lists and
pages, a memory's history, and the prompt's memory block (the base of core_tools.memory.store's MemoryStore,
which adds the writes).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from core_tools.memory import dates
from core_tools.memory.embedding import MemoryEmbedding, in_worker
from core_tools.memory.views import change_view, iso, memory_view
from core_tools.prompts import memory_block_with
from core_tools.turn_info import PromptSection, recalled
from db import connections, memory_search, memory_words
from db import memories as q
from db import memory_history as h
from db.memory_cache import PromptMemories

LAYER_CATEGORIES: dict[str, tuple[str, ...]] = {
    "long": ("fact", "preference", "relationship"),
    "mid": ("goal", "plan", "project"),
    "short": ("context", "summary"),
    "session": ("note", "task"),
}

# Weighted reciprocal rank fusion of three rankings (keywords, vector, the rows dated in a period the query
# names), chosen by `bench/bench_memory.py --eval --grid` on the tune half of bench/memory_eval/eval.json
# (a year of one user's chats, 762 turns, 278 questions with annotated evidence) and reported on the held-out
# half there. The earlier choice (keywords 0.1, from a 60-fact fixture) let keywords only break ties; on
# real conversation BM25 carries names and rare words that e5 blurs, so it gets a real share: on LoCoMo
# (bench/bench_memory_locomo.py) the same weight as the vector's, 1.0, beat 0.7 (recall@5/@10 57.7/66.0
# against 56.9/65.5; 0.5: 53.2/63.7; 1.3: 57.8/66.0; 1.6: 57.0/65.1), with k=5 (2, 3, 10, 20 no better).
KEYWORD_WEIGHT = 1.0
VECTOR_WEIGHT = 1.0
RRF_K = 5
DATE_WEIGHT = 1.0
# A query that names a period and a subject ("which race did I run in June?") ranks every row, the period's
# with a third ranking on top: on real conversation the turn that tells of an event is often dated after it
# ("I went camping last week", said in July, for "camping in June"), and a hard filter lost it (LoCoMo,
# bench/bench_memory_locomo.py: 0 -> 1 raised recall@5 55.5 -> 56.9). A query that names only the period
# ("what did I do last June?") gets only that period's rows (when it has any): PERIOD_ONLY_FACTOR.
OUTSIDE_FACTOR = 1.0
PERIOD_ONLY_FACTOR = 0.0
PERIOD_QUERY = "Today I went to"
# A query naming who said a memory ("what did Anna say about the trip?") ranks that person's memories
# higher: their fused scores are multiplied by SPEAKER_FACTOR. On LoCoMo (bench/bench_memory_locomo.py,
# every turn stored with its speaker) recall@5/@10 67.2/75.2 -> 70.9/78.3 on SQLite (PostgreSQL 70.0/77.4),
# the two-memory questions 34.6 -> 40.5 @5. Chosen over the top 50 candidates: 1.2: 68.6/75.8; 1.5:
# 70.4/77.2; 2: 71.0/78.3; 2.5: 70.8/78.9; 3: 69.9/79.0.
SPEAKER_FACTOR = 2.0
# Candidates each ranking contributes before fusion (keywords; the vector's bit stage asks for VECTOR_DEPTH
# or, when None, twice the limit with a floor of 20: db.memory_search.hybrid_search).
RECALL_DEPTH = 50
VECTOR_DEPTH: int | None = None
MAX_LIMIT = 50
LIST_MAX = 50

T = TypeVar("T")


class MemoryRecall:
    """Async reads over db.memories: recall, lists, history and the prompt's block."""

    _sessions: sessionmaker[Session]
    _engine: Engine  # the one `_sessions` is bound to: the prompt's reads run on it as Core
    _prompt_memories: PromptMemories  # what each turn's prompt read, with the user's memory revision
    embedding: MemoryEmbedding
    now: Callable[[], datetime]
    keyword_weight: float
    vector_weight: float
    rrf_k: int
    date_weight: float
    outside_factor: float
    speaker_factor: float
    recall_depth: int
    vector_depth: int | None
    timezone_of: Callable[[int], tzinfo] | None

    # -- plumbing -------------------------------------------------------------------------------------

    async def _db(self, fn: Callable[[Session], T]) -> T:
        """Run a short synchronous DB function in a worker thread and commit."""
        return await in_worker(self._sessions, fn)

    # -- read ----------------------------------------------------------------------------------------

    async def recall(
        self,
        user_id: int,
        query: str | None,
        *,
        layer: str | None = None,
        limit: int = 10,
        session_id: str | None = None,
        layers: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Hybrid (BM25 + vector) search of the user's current memories; recent ones for an empty query."""
        limit = max(1, min(MAX_LIMIT, limit))
        wanted = [layer] if layer else (list(layers) if layers else None)
        if not query or not query.strip():
            now = self.now()

            def recent(s: Session) -> list[dict[str, Any]]:
                if wanted and len(wanted) > 1:
                    rows = [
                        m for lyr in wanted for m in q.list_memories(s, user_id, now, layer=lyr, limit=limit)
                    ]
                    rows.sort(key=lambda m: m.updated_at, reverse=True)
                else:
                    rows = q.list_memories(
                        s,
                        user_id,
                        now,
                        layer=wanted[0] if wanted else None,
                        session_id=session_id,
                        limit=limit,
                    )
                return [memory_view(m) for m in rows[:limit]]

            return await self._db(recent)
        now = self.now()
        tz = self.timezone_of(user_id) if self.timezone_of is not None else UTC
        # A word check first: dateparser runs only for a query with a date-like word (~1 ms then); its first
        # use loads it (most of a second), in a worker thread so other chats go on.
        named = None
        if self.date_weight > 0:
            if dates.ready():
                named = dates.find_period(query, now, tz)
            else:
                named = await asyncio.to_thread(dates.find_period, query, now, tz)
        # "What did I do last June?" says nothing but the period: its own vector matches no event, so the
        # period's rows are ranked by a fixed first-person statement instead (chosen by bench_memory --eval).
        only_period = named is not None and dates.asks_only_for_period(query, memory_words.STOPWORDS)
        vector, emb_id = await self.embedding.embed_query(PERIOD_QUERY if only_period else query, user_id)

        def search(s: Session) -> list[dict[str, Any]]:
            hits = memory_search.hybrid_search(
                s,
                user_id,
                now,
                query_text=query,
                vector=vector,
                embedder_id=emb_id,
                layers=wanted,
                session_id=session_id,
                limit=limit,
                keyword_weight=self.keyword_weight,
                vector_weight=self.vector_weight,
                rrf_k=self.rrf_k,
                period=(named.start, named.end) if named is not None else None,
                date_weight=self.date_weight,
                outside_factor=PERIOD_ONLY_FACTOR if only_period else self.outside_factor,
                speaker_factor=self.speaker_factor,
                candidates=self.recall_depth,
                vector_candidates=self.vector_depth,
            )
            return [memory_view(h.memory, h.relevance) for h in hits]

        return await self._db(search)

    async def list_memories(
        self, user_id: int, *, layer: str | None = None, limit: int = 20, session_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The user's current memories, most recent first (bounded to 50)."""
        limit = max(1, min(LIST_MAX, limit))
        now = self.now()
        return await self._db(
            lambda s: [
                memory_view(m)
                for m in q.list_memories(s, user_id, now, layer=layer, session_id=session_id, limit=limit)
            ]
        )

    async def page(
        self,
        user_id: int,
        *,
        layer: str | None = None,
        session_id: str | None = None,
        offset: int = 0,
        limit: int = LIST_MAX,
    ) -> tuple[list[dict[str, Any]], dict[str, int]]:
        """One page of the user's current memories, most recent first, as `list_memories` orders them, and
        how many current memories each layer has (the session layer: of `session_id`); one transaction."""
        limit = max(1, min(LIST_MAX, limit))
        offset = max(0, offset)
        now = self.now()

        def work(s: Session) -> tuple[list[dict[str, Any]], dict[str, int]]:
            rows = q.list_memories(
                s, user_id, now, layer=layer, session_id=session_id, limit=limit, offset=offset
            )
            counts = q.count_by_layer(s, user_id, now, session_id)
            return [memory_view(m) for m in rows], {name: counts.get(name, 0) for name in LAYER_CATEGORIES}

        return await self._db(work)

    async def still_kept(self, user_id: int, memory_ids: Sequence[str]) -> set[str]:
        """Which of these ids are still the user's memories (not forgotten since)."""
        ids = list(memory_ids)
        if not ids:
            return set()
        return await self._db(lambda s: {i for i in ids if q.get_memory(s, user_id, i) is not None})

    async def history(self, user_id: int, memory_id: str) -> list[dict[str, Any]]:
        """A memory's changes, newest first (empty for an unknown id or another user's)."""
        return await self._db(lambda s: [change_view(c) for c in h.history(s, user_id, memory_id)])

    async def recent(self, user_id: int, days: int = 7, limit: int = 20) -> list[dict[str, Any]]:
        """Memories added or rewritten in the last `days` that are still current, newest first, with who."""
        since = self.now() - timedelta(days=days)
        now = self.now()

        def work(s: Session) -> list[dict[str, Any]]:
            out = []
            for r in h.recent_adds(s, user_id, since, limit):
                if r.memory.expires_at is not None and r.memory.expires_at <= now:
                    continue
                out.append({**memory_view(r.memory), "by": r.actor, "at": iso(r.at)})
            return out

        return await self._db(work)

    async def session_memories(self, user_id: int, session_id: str) -> list[dict[str, Any]]:
        """The current session's memories, oldest first."""
        now = self.now()
        return await self._db(
            lambda s: [memory_view(m) for m in q.session_memories(s.connection(), user_id, session_id, now)]
        )

    # -- prompt injection ----------------------------------------------------------------------------

    async def context_for_prompt(
        self, user_id: int, session_id: str, message_text: str, budget_chars: int = 2000
    ) -> str:
        """Relevant long/mid memories and this session's, as a quoted-data block in budget; "" if none."""
        return (await self.prompt_section(user_id, session_id, message_text, budget_chars)).text

    async def prompt_section(
        self, user_id: int, session_id: str, message_text: str, budget_chars: int = 2000
    ) -> PromptSection:
        """`context_for_prompt` with the memories that went into the block (a turn's "why this answer")."""
        now = self.now()
        # Small indexed reads (the user's memory revision; the two reads behind it only when it moved:
        # db/memory_cache.py), made on the event loop like the conversation reads: a worker thread waits
        # for the GIL behind the busy loop, which measured 2.5-3 ms a hop (bench/bench_chat.py). A Core
        # connection, not an ORM session (which cost as much as one of the reads).
        with connections.read(self._engine) as conn:
            # Most turns of a user without long/mid memories would otherwise pay for an embedding for nothing.
            has_relevant, rows = self._prompt_memories.read(conn, user_id, session_id, now)
        session = [memory_view(m) for m in rows]
        relevant = (
            await self.recall(user_id, message_text, layers=["long", "mid"], limit=8) if has_relevant else []
        )
        text, used = memory_block_with(relevant, session, budget_chars)
        return PromptSection(text, recalled(used))
