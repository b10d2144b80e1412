"""The memory store's embedding: a usable embedder, query and passage vectors, and re-embedding every row.

An embedder that fails, is over a usage cap or does not fit the vector table never fails a turn: recall
falls back to keyword search and a row is saved without a vector (reembed adds it later).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable
from typing import TypeVar

from sqlalchemy.orm import Session, sessionmaker

from core_tools.errors import BudgetExceeded
from core_tools.memory.embedders import Embedder
from core_tools.memory.passage import index_id, passage_text
from db import memory_vectors

# Logs under the store's name: its warnings were the store's before this module was split from it.
log = logging.getLogger("core_tools.memory.store")

T = TypeVar("T")


async def in_worker(sessions: sessionmaker[Session], fn: Callable[[Session], T]) -> T:
    """Run a short synchronous DB function in a worker thread and commit."""

    def run() -> T:
        with sessions() as s, s.begin():
            return fn(s)

    return await asyncio.to_thread(run)


class MemoryEmbedding:
    """The embedder side of MemoryStore: warns once when it cannot be used, then degrades to keywords."""

    def __init__(self, sessions: sessionmaker[Session], embedder: Embedder | None) -> None:
        self._sessions = sessions
        self.embedder = embedder
        self._vec_dim: int | None = None
        self._warned = False
        self._warned_budget = False
        self.reindexed = False  # a reembed pass found nothing more to do (this process's embedder)

    async def _db(self, fn: Callable[[Session], T]) -> T:
        return await in_worker(self._sessions, fn)

    def _warn_once(self, message: str, exc: BaseException | None = None) -> None:
        if not self._warned:
            self._warned = True
            log.warning("memory: %s; recall falls back to keyword search (%r)", message, exc)

    async def usable(self) -> Embedder | None:
        """The embedder, when its vectors fit the vector table (else None: recall uses keywords)."""
        emb = self.embedder
        if emb is None:
            return None
        if self._vec_dim is None:
            self._vec_dim = await self._db(memory_vectors.vec_dim)
        if self._vec_dim != emb.dim:
            # Vectors of another size cannot go into memories_vec until reembed() rebuilds it.
            self._warn_once(f"embedder {emb.id} has dim {emb.dim}, the vector table {self._vec_dim}")
            return None
        return emb

    def _embed_failed(self, emb: Embedder, exc: Exception) -> None:
        if isinstance(exc, BudgetExceeded):
            # The user is at a usage cap (a paid embeddings endpoint): their recall is keyword-only until
            # it resets; not an embedder fault, so it has its own once-only line.
            if not self._warned_budget:
                self._warned_budget = True
                log.warning("memory: embedding refused by the budget; recall falls back to keyword search")
            return
        self._warn_once(f"embedder {emb.id} failed", exc)

    async def embed_query(self, text: str, user_id: int) -> tuple[list[float] | None, str | None]:
        """(vector, embedder id) of a recall query, or (None, None): keyword search then."""
        emb = await self.usable()
        if emb is None or not text.strip():
            return None, None
        try:
            return await emb.embed_query(text, user_id=user_id), index_id(emb.id)
        except Exception as exc:  # any embedder failure degrades to keywords; the turn goes on
            self._embed_failed(emb, exc)
            return None, None

    async def embed_passage(self, text: str, user_id: int) -> tuple[list[float] | None, str | None]:
        """(vector, index id) of a memory's passage text (core_tools/memory/passage.py), or (None, None):
        the row is saved without one."""
        emb = await self.usable()
        if emb is None:
            return None, None
        try:
            return (await emb.embed_passages([text], user_id=user_id))[0], index_id(emb.id)
        except Exception as exc:  # store still saves the row; reembed() adds the vector later
            self._embed_failed(emb, exc)
            return None, None

    async def reembed(
        self,
        embedder: Embedder | None = None,
        batch: int = 64,
        *,
        budget_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> int:
        """Switch to `embedder` (if given); embed every row whose vector is missing, from another embedder or
        made from another passage format (what a memory carries: core_tools/memory/passage.py). Resumable:
        a row done is done; a stop leaves the rest for the next run, recall using their old vectors.
        `budget_s`: stop after the batch that passes this many seconds (the job runs again later).

        When the dimension differs from the vector table's, the table is dropped and recreated with the new
        dimension first (every row is then re-embedded); recall is keyword-only for rows not yet done.
        """
        if embedder is not None:
            self.embedder = embedder
        emb = self.embedder
        if emb is None:
            return 0
        dim = await self._db(memory_vectors.vec_dim)
        if dim != emb.dim:
            log.warning("memory: rebuilding the vector table for %s (dim %s -> %s)", emb.id, dim, emb.dim)
            await self._db(lambda s: memory_vectors.rebuild_vec_table(s, emb.dim))
        self._vec_dim = emb.dim
        self._warned = False
        target = index_id(emb.id)
        done, after = 0, 0
        deadline = None if budget_s is None else clock() + budget_s
        while deadline is None or clock() < deadline:
            rows = await self._db(functools.partial(_rows_to_embed, target, after, batch))
            if not rows:
                self.reindexed = True
                return done
            try:  # a maintenance job, not a user's request: accounted without a user
                vectors = await emb.embed_passages([source_text(r) for r in rows])
            except Exception as exc:  # try again at the next start; the rows keep working by keyword
                log.warning("memory: reembed stopped after %d rows: %r", done, exc)
                return done
            pairs = [(r.id, v) for r, v in zip(rows, vectors, strict=True)]
            await self._db(functools.partial(_store_vectors, pairs, target))
            done += len(rows)
            after = rows[-1].id
        return done


def source_text(row: memory_vectors.PassageSource) -> str:
    """The passage text of a row read for re-embedding."""
    return passage_text(row.content, row.when, row.context, row.speaker)


def _rows_to_embed(
    embedder_id: str, after: int, batch: int, s: Session
) -> list[memory_vectors.PassageSource]:
    return memory_vectors.rows_to_embed(s, embedder_id, after, batch)


def _store_vectors(pairs: list[tuple[int, list[float]]], embedder_id: str, s: Session) -> None:
    memory_vectors.store_vectors(s, pairs, embedder_id)
