"""memories: full vectors in memories.embedding, binary-quantized sharded copies in memories_vec

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23 09:00:00.000000

Recall searches the bit vectors (hamming distance, one partition per user and shard) and re-scores the
candidates by exact cosine on memories.embedding (see db/memory_search.py). Upgrade moves every stored
vector into memories.embedding and rebuilds memories_vec from it; downgrade rebuilds the float vec0 table
of 0002.

On PostgreSQL `memories.embedding` is a pgvector `vector(384)` (the dimension of 0002's table; the app
retypes it when the embedder's differs) and `memories.embedding_bits` its quantized copy (see PG_UPGRADE).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Migrations do not import application code: the same DDL, shard count and center are in db/memory_vectors.py.
SHARDS = 8
CENTER_SAMPLE = 100
CENTER_DDL = (
    "CREATE VIRTUAL TABLE memories_vec_center USING vec0(id integer primary key, center float[{bits}])"
)
BIT_DDL = (
    "CREATE VIRTUAL TABLE memories_vec USING vec0("
    "memory_id integer primary key, user_id integer partition key, shard integer partition key, "
    "layer text, embedding bit[{bits}])"
)
FLOAT_DDL = (
    "CREATE VIRTUAL TABLE memories_vec USING vec0("
    "memory_id integer primary key, user_id integer partition key, layer text, "
    "embedding float[{dim}] distance_metric=cosine)"
)


def _vec_sql() -> str:
    sql = op.get_bind().execute(sa.text("SELECT sql FROM sqlite_master WHERE name = 'memories_vec'")).scalar()
    return str(sql or "")


def _fill_bits(bits: int, dim: int) -> None:
    bind = op.get_bind()
    size = dim * 4
    blobs = bind.execute(
        sa.text("SELECT embedding FROM memories WHERE length(embedding) = :size ORDER BY id LIMIT :n"),
        {"size": size, "n": CENTER_SAMPLE},
    ).scalars()
    total = [0.0] * dim
    n = 0
    for blob in blobs:
        total = [a + b for a, b in zip(total, struct.unpack(f"<{dim}f", blob), strict=True)]
        n += 1
    if n == 0:
        return  # no vectors yet: db.memory_vectors sets the center once CENTER_SAMPLE vectors exist
    # Bits are signs relative to the mean vector; zero-padded to whole bytes.
    center = struct.pack(f"<{bits}f", *([x / n for x in total] + [0.0] * (bits - dim)))
    bind.execute(sa.text("INSERT INTO memories_vec_center(id, center) VALUES (1, :c)"), {"c": center})
    bind.execute(
        sa.text(
            "INSERT INTO memories_vec(memory_id, user_id, shard, layer, embedding) "
            "SELECT id, user_id, id % :shards, layer, "
            "vec_quantize_binary(vec_sub(CAST(embedding || zeroblob(:pad) AS BLOB), :c)) FROM memories "
            "WHERE length(embedding) = :size"
        ),
        {"shards": SHARDS, "pad": (bits - dim) * 4, "c": center, "size": size},
    )


# PostgreSQL: the same two stages as on SQLite. `embedding_bits` holds the signs of (embedding - center),
# set by a trigger from the full vector; the covering index (user_id, layer) INCLUDE (id, embedding_bits)
# holds one user's bit vectors together, so the hamming search is an index-only scan of a few MB, where the
# full vectors of a user lie scattered over the table (bench/bench_pg.py). db/recall_postgres.py keeps the
# center (zero until CENTER_SAMPLE vectors exist) and retypes both columns when the dimension changes.
PG_UPGRADE = (
    "CREATE EXTENSION IF NOT EXISTS vector",
    "ALTER TABLE memories ADD COLUMN embedding vector(384)",
    # bit varying, not bit(384): the trigger function would keep the old length after a retype.
    "ALTER TABLE memories ADD COLUMN embedding_bits bit varying",
    "CREATE TABLE memories_vec_center (id integer PRIMARY KEY, center vector NOT NULL, "
    "sample integer NOT NULL DEFAULT 0)",
    "INSERT INTO memories_vec_center (id, center) VALUES (1, array_fill(0, ARRAY[384])::real[]::vector)",
    # On every insert and update (a column list would pin the column's type): bits follow a new vector; an
    # update that keeps the vector keeps the bits it sets (the re-quantizing after a new center).
    "CREATE FUNCTION memories_quantize() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
    "NEW.embedding_bits := CASE WHEN NEW.embedding IS NULL THEN NULL "
    "WHEN TG_OP = 'UPDATE' AND NEW.embedding IS NOT DISTINCT FROM OLD.embedding THEN NEW.embedding_bits "
    "ELSE binary_quantize(NEW.embedding - (SELECT center FROM memories_vec_center WHERE id = 1)) END; "
    "RETURN NEW; END $$",
    "CREATE TRIGGER memories_quantize BEFORE INSERT OR UPDATE ON memories "
    "FOR EACH ROW EXECUTE FUNCTION memories_quantize()",
    "CREATE INDEX ix_memories_user_bits ON memories (user_id, layer) INCLUDE (id, embedding_bits)",
)
PG_DOWNGRADE = (
    "DROP TRIGGER IF EXISTS memories_quantize ON memories",
    "DROP FUNCTION IF EXISTS memories_quantize()",
    "DROP TABLE IF EXISTS memories_vec_center",
    "ALTER TABLE memories DROP COLUMN embedding_bits",  # its index goes with it
    "ALTER TABLE memories DROP COLUMN embedding",
)


def _postgresql_upgrade() -> None:
    for statement in PG_UPGRADE:
        op.execute(statement)


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        _postgresql_upgrade()
        return
    m = re.search(r"float\[(\d+)\]", _vec_sql())
    dim = int(m.group(1)) if m else 384
    # ALTER TABLE ADD COLUMN in place (no table copy, which would drop the FTS triggers of 0002).
    op.add_column("memories", sa.Column("embedding", sa.LargeBinary(), nullable=True))
    if m:
        # A full scan of the vec0 table (one pass), joined to memories by primary key.
        op.execute(
            "UPDATE memories SET embedding = v.embedding "
            "FROM (SELECT memory_id, embedding FROM memories_vec) AS v WHERE v.memory_id = memories.id"
        )
    # A row marked as embedded without a vector gets one from the next reembed.
    op.execute("UPDATE memories SET embedder = NULL WHERE embedding IS NULL")
    op.execute("DROP TABLE IF EXISTS memories_vec")
    bits = -(-dim // 8) * 8
    op.execute(BIT_DDL.format(bits=bits))
    op.execute(CENTER_DDL.format(bits=bits))
    _fill_bits(bits, dim)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for statement in PG_DOWNGRADE:
            op.execute(statement)
        return
    m = re.search(r"bit\[(\d+)\]", _vec_sql())
    bits = int(m.group(1)) if m else 384
    size = (
        op.get_bind()
        .execute(sa.text("SELECT length(embedding) FROM memories WHERE embedding IS NOT NULL LIMIT 1"))
        .scalar()
    )
    dim = int(size) // 4 if size else bits
    op.execute("DROP TABLE IF EXISTS memories_vec_center")
    op.execute("DROP TABLE IF EXISTS memories_vec")
    op.execute(FLOAT_DDL.format(dim=dim))
    bind = op.get_bind()
    bind.execute(
        sa.text(
            "INSERT INTO memories_vec(memory_id, user_id, layer, embedding) "
            "SELECT id, user_id, layer, embedding FROM memories WHERE length(embedding) = :size"
        ),
        {"size": dim * 4},
    )
    bind.execute(
        sa.text("UPDATE memories SET embedder = NULL WHERE embedding IS NULL OR length(embedding) != :size"),
        {"size": dim * 4},
    )
    # SQLite drops a plain column in place; a batch table copy would lose the FTS triggers on memories.
    op.execute("ALTER TABLE memories DROP COLUMN embedding")
