"""Recall on PostgreSQL from a copy of the user's bit vectors kept in this process.

Reading a user's bit vectors is what the vector search costs in PostgreSQL (about 8 ms of index-only scan
at 100k memories, every query; bench/bench_pg.py). Here they are read once into numpy (the ids, a layer
code each and the packed bits, 57 bytes a memory), searched by hamming distance in the process, and the
candidates are re-scored by exact cosine in PostgreSQL as before (db.memory_search). The candidates are
the ones PostgreSQL's search gives: the same bits against the same quantization center, nearest first,
ties by id. At 100k memories: 1.1 ms median against 17 ms in PostgreSQL, 5.4 MB (bench/bench_pg.py).

A copy is used only while it is as new as the database. Migration 0018 keeps a version per user
(`memories_vec_versions`), bumped in the same transaction as every change of the user's vector rows, and
logs the changed ids (`memories_vec_log`). Every search reads the version first (one indexed read); when
it moved, the copy takes the changed rows from the log (or is read whole when the log does not reach back,
after a new center or a bulk change). The version and the rows it labels are read in one statement, so a
copy is never newer or older than its label. So a write by another replica is seen by the next recall. A
transaction that has written anything searches in PostgreSQL (its uncommitted rows must not reach a copy
that other sessions use).

Copies are bounded by `configure(max_mb)` (least recently used first out; 0: no copies). A user whose
vectors alone exceed the bound is searched in PostgreSQL. Searches may run in several threads: a copy is
never changed once made (a newer one replaces it), and the table of copies is guarded by a lock.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import count
from typing import Any

import numpy as np
import numpy.typing as npt
from cachetools import LRUCache
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

# Same numbers as migration 0018: a statement that changes more of a user's rows logs none (the copy is
# read whole), and a user's log keeps this many versions.
LOG_ROWS = 1000
LOG_VERSIONS = 1000
# More changed rows than this since the copy's version: it is read whole (cheaper then).
DELTA_ROWS = 5000
DEFAULT_MAX_MB = 64

_STATE = text(
    "SELECT (SELECT version FROM memories_vec_versions WHERE user_id = CAST(:u AS bigint)), "
    "pg_current_xact_id_if_assigned() IS NULL"
)
# The user's bit vectors by layer, in one statement with the version they are at and the center the
# query's bits are computed against: one bytea a layer, each row its id (int4send: 4 bytes, big-endian)
# then its bits (varbit_send less its 4-byte length: the first bit is the high bit of the first byte,
# numpy's packbits order). Read through psycopg in binary: text would send the 5.2 MB of 100k memories as
# hex (78 against 24 ms at 100k; the whole copy, made, 30-45 ms in bench/bench_pg.py).
_WHOLE = (
    "WITH parts AS (SELECT layer, count(*) AS n,"
    " string_agg(int4send(id) || substring(varbit_send(embedding_bits) FROM 5), ''::bytea) AS rows"
    " FROM memories WHERE user_id = %(u)s::bigint AND embedding_bits IS NOT NULL GROUP BY layer)"
    " SELECT (SELECT version FROM memories_vec_versions WHERE user_id = %(u)s::bigint),"
    " (SELECT center::real[] FROM memories_vec_center WHERE id = 1), parts.layer, parts.n, parts.rows"
    " FROM (SELECT 1) AS one LEFT JOIN parts ON true"
)
# The rows changed after the copy's version, as they are now (no layer: gone), with the version they are
# at and the oldest version the log can be trusted from.
_CHANGED = text(
    "WITH v AS (SELECT version, reload_at FROM memories_vec_versions WHERE user_id = CAST(:u AS bigint)),"
    " ch AS (SELECT DISTINCT memory_id FROM memories_vec_log WHERE user_id = CAST(:u AS bigint)"
    " AND version > :c AND version <= (SELECT version FROM v) LIMIT :n)"
    " SELECT (SELECT version FROM v) AS version, (SELECT reload_at FROM v) AS reload_at,"
    " ch.memory_id, m.layer, substring(varbit_send(m.embedding_bits) FROM 5) AS bits"
    " FROM (SELECT 1) AS one LEFT JOIN (ch LEFT JOIN memories AS m ON m.id = ch.memory_id"
    " AND m.user_id = CAST(:u AS bigint) AND m.embedding_bits IS NOT NULL) ON true"
)

Ints = npt.NDArray[np.int64]


@dataclass(frozen=True)
class Copy:
    """One user's bit vectors at one version; never changed once made."""

    version: int | None  # None: the user's rows predate migration 0018 and were not written since
    center: npt.NDArray[np.float32] | None  # None: no center row (then PostgreSQL is asked)
    nbytes_bits: int  # bytes of one row's bits as stored (the dimension rounded up to whole bytes)
    layers: tuple[str, ...]  # code -> layer name
    ids: Ints
    codes: npt.NDArray[np.uint8]
    words: npt.NDArray[np.uint64]  # (words a row, rows): one contiguous array per 64 bits

    @property
    def nbytes(self) -> int:
        """Memory taken by the arrays."""
        return int(self.ids.nbytes + self.codes.nbytes + self.words.nbytes)


def _words(bits: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint64]:
    # Rows of bits (rows, bytes), zero-padded to whole 64-bit words and turned column-major: each word's
    # values of every row lie together, so the distance is a few passes over contiguous arrays.
    rows, width = bits.shape
    padded = np.zeros((rows, -(-width // 8) * 8), dtype=np.uint8)
    padded[:, :width] = bits
    return np.ascontiguousarray(padded.view(np.uint64).T)


def read_copy(s: Session, user_id: int) -> Copy | None:
    """The user's bit vectors read whole, at the version they are at; None: PostgreSQL must search."""
    driver: Any = s.connection().connection.driver_connection  # psycopg, in the session's transaction
    rows = driver.execute(_WHOLE, {"u": user_id}, binary=True).fetchall()
    # psycopg's own rows (tuples), in _WHOLE's order: version, center, then one (layer, n, rows) a layer.
    version, center = rows[0][0], rows[0][1]
    parts = [(str(layer), int(n), bytes(blob)) for _, _, layer, n, blob in rows if layer is not None]
    sizes = {len(blob) // n for _, n, blob in parts}
    if len(sizes) > 1 or any(len(blob) % n for _, n, blob in parts) or min(sizes, default=5) < 5:
        return None  # rows of different widths (a dimension change under way): PostgreSQL decides
    if len(parts) > 255:
        return None  # layer codes are one byte (the app has four layers)
    width = sizes.pop() - 4 if sizes else 0
    table = np.frombuffer(
        b"".join(blob for _, _, blob in parts), dtype=np.dtype([("id", ">i4"), ("bits", np.uint8, (width,))])
    )
    return Copy(
        version=None if version is None else int(version),
        center=None if center is None else np.array(center, dtype=np.float32),
        nbytes_bits=width,
        layers=tuple(layer for layer, _, _ in parts),
        ids=table["id"].astype(np.int64),
        codes=np.repeat(np.arange(len(parts), dtype=np.uint8), [n for _, n, _ in parts]),
        words=_words(table["bits"]),
    )


def _changed(s: Session, user_id: int, old: Copy) -> Copy | None:
    """`old` brought up to date from the log; None when the log cannot (read the copy whole)."""
    if old.version is None:
        return None
    rows = s.execute(_CHANGED, {"u": user_id, "c": old.version, "n": DELTA_ROWS + 1}).all()
    version, reload_at = rows[0].version, rows[0].reload_at
    if version is None or int(reload_at) > old.version or not 0 < int(version) - old.version < LOG_VERSIONS:
        return None
    changed = [r for r in rows if r.memory_id is not None]
    if len(changed) > DELTA_ROWS:
        return None
    now = [r for r in changed if r.layer is not None]
    layers = list(old.layers)
    for r in now:
        if str(r.layer) not in layers:
            layers.append(str(r.layer))
    if len(layers) > 255 or any(len(bytes(r.bits)) != old.nbytes_bits for r in now):
        return None
    # The changed rows' old entries out (np.delete by position: a boolean mask over (words, rows) took
    # 1.8 ms at 100k, this 0.2; nothing to take out for new rows), their current ones appended.
    gone = np.flatnonzero(np.isin(old.ids, np.array([int(r.memory_id) for r in changed], dtype=np.int64)))
    ids, codes, words = old.ids, old.codes, old.words
    if gone.size:
        ids, codes, words = np.delete(ids, gone), np.delete(codes, gone), np.delete(words, gone, axis=1)
    bits = np.frombuffer(b"".join(bytes(r.bits) for r in now), dtype=np.uint8)
    return Copy(
        version=int(version),
        center=old.center,
        nbytes_bits=old.nbytes_bits,
        layers=tuple(layers),
        ids=np.concatenate([ids, np.array([int(r.memory_id) for r in now], dtype=np.int64)]),
        codes=np.concatenate([codes, np.array([layers.index(str(r.layer)) for r in now], dtype=np.uint8)]),
        words=np.concatenate([words, _words(bits.reshape(len(now), old.nbytes_bits))], axis=1),
    )


def query_words(copy: Copy, vector: Sequence[float]) -> npt.NDArray[np.uint64] | None:
    """The query's bits as PostgreSQL computes them (binary_quantize(q - center): a bit set where the
    float32 value is above the center's), in the copy's words; None when the dimensions differ."""
    if copy.center is None or len(vector) != len(copy.center):
        return None
    q = np.asarray(vector, dtype=np.float32)
    packed = np.packbits(q > copy.center)  # the sign of the float32 difference: q above the center
    per_row = copy.words.shape[0] * 8
    if len(packed) != copy.nbytes_bits:
        return None
    padded = np.zeros(per_row, dtype=np.uint8)
    padded[: len(packed)] = packed
    return padded.view(np.uint64)


def nearest_ids(copy: Copy, vector: Sequence[float], k: int, layer: str | None) -> list[int] | None:
    """The ids of the k rows nearest to the vector by hamming distance, ties by id; None: ask PostgreSQL."""
    rows = copy.ids.size
    if rows == 0:
        return []
    q = query_words(copy, vector)
    if q is None:
        return None
    bits = copy.words.shape[0] * 64
    # Into buffers made once a search: a pass over 100k rows costs about what allocating its result does.
    dist = np.zeros(rows, dtype=np.uint16)  # pgvector's vectors have at most 16000 dimensions
    xored = np.empty(rows, dtype=np.uint64)
    ones = np.empty(rows, dtype=np.uint8)
    for j in range(copy.words.shape[0]):
        np.bitwise_xor(copy.words[j], q[j], out=xored)
        np.bitwise_count(xored, out=ones)
        np.add(dist, ones, out=dist)
    if layer is not None:
        if layer not in copy.layers:
            return []
        dist[copy.codes != copy.layers.index(layer)] = bits + 1  # farther than any row of the layer
    # Distances are small integers: the k-th is found by counting them (a quarter of np.partition's cost).
    counts = np.bincount(dist, minlength=bits + 2)
    eligible = rows - int(counts[bits + 1])
    kth = bits if eligible <= k else int(np.searchsorted(np.cumsum(counts), k))
    sel = np.flatnonzero(dist <= kth)  # every row tied at the k-th distance: ties go by id below
    order = np.lexsort((copy.ids[sel], dist[sel]))[:k]
    return [int(i) for i in copy.ids[sel][order]]


class RecallCache:
    """Copies of users' bit vectors, least recently used first out, within a bound in bytes."""

    def __init__(self, max_bytes: int) -> None:
        self._lock = threading.Lock()
        self._copies = _copies(max_bytes)
        self._too_big: set[tuple[int, int]] = set()

    @property
    def max_bytes(self) -> int:
        """The bound on the bytes the copies take."""
        return int(self._copies.maxsize)

    @max_bytes.setter
    def max_bytes(self, value: int) -> None:
        """A new bound, the copies forgotten."""
        with self._lock:
            self._copies = _copies(value)
            self._too_big.clear()

    @property
    def nbytes(self) -> int:
        """Bytes the copies take."""
        return int(self._copies.currsize)

    def get(self, key: tuple[int, int]) -> Copy | None:
        """The copy of (engine, user), marked as just used."""
        with self._lock:
            return self._copies.get(key)

    def too_big(self, key: tuple[int, int]) -> bool:
        """Whether the user's copy did not fit the bound."""
        return key in self._too_big

    def put(self, key: tuple[int, int], copy: Copy) -> bool:
        """Keep a copy (the oldest used go to make room); False when it alone exceeds the bound."""
        with self._lock:
            self._copies.pop(key, None)
            if copy.nbytes > self._copies.maxsize:
                self._too_big.add(key)
                return False
            self._copies[key] = copy
            return True

    def drop_engine(self, engine_key: int) -> None:
        """Forget every copy made through an engine (it was garbage collected)."""
        with self._lock:
            for key in [k for k in self._copies if k[0] == engine_key]:
                del self._copies[key]
            self._too_big = {k for k in self._too_big if k[0] != engine_key}

    def clear(self) -> None:
        """Forget every copy."""
        with self._lock:
            self._copies.clear()
            self._too_big.clear()


def _copies(max_bytes: int) -> LRUCache[tuple[int, int], Copy]:
    # Bounded by the bytes of the copies' arrays, not by their number.
    return LRUCache(max(0, max_bytes), getsizeof=lambda copy: copy.nbytes)


_CACHE = RecallCache(DEFAULT_MAX_MB << 20)
_ENGINE_KEYS: weakref.WeakKeyDictionary[Engine, int] = weakref.WeakKeyDictionary()
_NEXT_KEY = count(1)
_KEYS_LOCK = threading.Lock()


def configure(max_mb: float) -> None:
    """Bound the memory the copies take (MB; 0: no copies, every search in PostgreSQL)."""
    _CACHE.max_bytes = max(0, int(max_mb * (1 << 20)))  # (the copies made under the old one forgotten)


def cache() -> RecallCache:
    """The process's cache (for the benchmark and the tests)."""
    return _CACHE


def _engine_key(engine: Engine) -> int:
    # Copies are per engine (one database each): a test's fresh database never meets another's copies.
    with _KEYS_LOCK:
        found = _ENGINE_KEYS.get(engine)
        if found is None:
            found = _ENGINE_KEYS[engine] = next(_NEXT_KEY)
            weakref.finalize(engine, _CACHE.drop_engine, found)
        return found


def _engine(s: Session) -> Engine:
    bind: Any = s.get_bind()
    return bind if isinstance(bind, Engine) else bind.engine


def vector_candidates(
    s: Session, user_id: int, vector: Sequence[float], k: int, layer: str | None
) -> list[int] | None:
    """The user's k nearest bit vectors, from the process's copy brought up to date; None: ask PostgreSQL
    (no copies kept, the copy does not fit, or this transaction has written)."""
    if _CACHE.max_bytes <= 0:
        return None
    key = (_engine_key(_engine(s)), int(user_id))
    if _CACHE.too_big(key):
        return None
    version, clean = s.execute(_STATE, {"u": user_id}).one()
    if not clean:
        return None
    copy = _CACHE.get(key)
    if copy is None or copy.version != version:
        fresh = _changed(s, user_id, copy) if copy is not None else None
        copy = fresh if fresh is not None else read_copy(s, user_id)
        if copy is None:
            return None
        _CACHE.put(key, copy)
    return nearest_ids(copy, vector, k, layer)
