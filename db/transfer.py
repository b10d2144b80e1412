"""Copying every table from one database to another (`python -m bot migrate-db --to postgresql+psycopg://...`).

Both databases are first migrated to head, so they have the same tables; then every table the models declare
is copied in foreign-key order, in batches, as an upsert by primary key: running it again copies rows added
since and brings changed rows up to date, without duplicates. Memories are re-indexed on the way: their
words by the target's recall backend, their vectors into the target's vector index (a vector of another
dimension than the target's is dropped and made again by the next reembed at start). Afterwards each table's
row count is compared.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, Table, func, inspect, select, text
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from db.memory_words import said_text
from db.migrate import upgrade
from db.models import Base
from db.recall import recall_backend

BATCH = 1000


# Which processes run and what they hold right now: not data, and nothing in them is alive after a move.
RUNTIME_TABLES = frozenset({"replicas", "chat_leases", "job_leases"})


@dataclass
class TableCopy:
    """What happened to one table."""

    name: str
    source_rows: int
    target_rows: int = 0

    @property
    def ok(self) -> bool:
        """Whether the target holds as many rows as the source."""
        return self.source_rows == self.target_rows


@dataclass
class CopyReport:
    """The copy's outcome, table by table."""

    tables: list[TableCopy] = field(default_factory=list)
    memories_indexed: int = 0
    vectors_copied: int = 0
    vectors_dropped: int = 0

    @property
    def ok(self) -> bool:
        """Whether every table's counts agree."""
        return all(t.ok for t in self.tables)


def _upsert(table: Table, dialect: str, rows: Sequence[dict[str, Any]]) -> Any:
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert(table).values(list(rows))
    keys = [c.name for c in table.primary_key.columns]
    given = set(rows[0]) if rows else set()
    others = {c.name: stmt.excluded[c.name] for c in table.columns if c.name not in keys and c.name in given}
    if not others:
        return stmt.on_conflict_do_nothing(index_elements=keys)
    return stmt.on_conflict_do_update(index_elements=keys, set_=others)


def _reset_sequences(conn: Connection, table: Table) -> None:
    # Rows came with their ids: the next id PostgreSQL hands out must come after them.
    for col in table.primary_key.columns:
        if col.autoincrement is True or (col.autoincrement == "auto" and col.type.python_type is int):
            conn.execute(
                text(
                    f"SELECT setval(pg_get_serial_sequence(:t, :c), "  # noqa: S608  # model names only
                    f"COALESCE((SELECT max({col.name}) FROM {table.name}), 1), "
                    f"(SELECT max({col.name}) FROM {table.name}) IS NOT NULL) "
                    "WHERE pg_get_serial_sequence(:t, :c) IS NOT NULL"
                ),
                {"t": table.name, "c": col.name},
            )


def _count(conn: Connection, table: Table) -> int:
    return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def copy_database(
    source: Engine, target: Engine, *, say: Callable[[str], None] = lambda _: None, batch: int = BATCH
) -> CopyReport:
    """Migrate both databases to head and copy every table from `source` into `target` (see the module)."""
    for engine in (source, target):
        upgrade(engine.url.render_as_string(hide_password=False))
    report = CopyReport()
    with source.connect() as src, target.connect() as dst:
        match_vector_dim(src, dst, say)
        dst.commit()
        copy_tables(src, dst, report, say=say, batch=batch, commit=True)
    if report.memories_indexed:
        say(
            f"memories: {report.memories_indexed} re-indexed ({report.vectors_copied} with a vector"
            + (
                f", {report.vectors_dropped} of another dimension left for the next reembed)"
                if report.vectors_dropped
                else ")"
            )
        )
    return report


def match_vector_dim(src: Connection, dst: Connection, say: Callable[[str], None] = lambda _: None) -> None:
    """Give an empty target's vector index the source's dimension (the caller commits)."""
    # A session bound to a connection outside a transaction rolls back what it began when it closes: begin
    # here, so that the session joins this transaction and the caller's commit keeps the rebuilt index.
    dst.execute(text("SELECT 1"))
    with Session(bind=src) as s:
        source_dim = recall_backend(s).vec_dim(s)
    with Session(bind=dst) as t:
        backend = recall_backend(t)
        target_dim = backend.vec_dim(t)
        has_memories = t.execute(text("SELECT 1 FROM memories LIMIT 1")).first() is not None
        if source_dim is not None and source_dim != target_dim and not has_memories:
            say(f"memories: vector index rebuilt for {source_dim} dimensions (was {target_dim})")
            backend.rebuild_vec_table(t, source_dim)
            t.flush()


def copy_tables(
    src: Connection,
    dst: Connection,
    report: CopyReport,
    *,
    say: Callable[[str], None] = lambda _: None,
    batch: int = BATCH,
    commit: bool = True,
    skip: frozenset[str] = RUNTIME_TABLES,
) -> None:
    """Copy every table the models declare (but `skip`) from `src` into `dst`, in foreign-key order, as
    upserts by primary key, memories re-indexed on the way; each table's counts go into `report`. `commit`
    commits each batch (a re-runnable move); without it the caller commits once (all or nothing)."""
    dialect = dst.dialect.name
    src_columns, dst_columns = _columns(src), _columns(dst)
    for table in Base.metadata.sorted_tables:
        if table.name in skip or table.name not in src_columns or table.name not in dst_columns:
            continue  # a table of another schema revision than both databases' (an upgrade's copy)
        common = src_columns[table.name] & dst_columns[table.name]
        columns = [c for c in table.columns if c.name in common]
        done = TableCopy(table.name, _count(src, table))
        result = src.execution_options(yield_per=batch).execute(
            select(*columns).order_by(*table.primary_key.columns)
        )
        target_dim = _target_dim(dst)
        for part in result.mappings().partitions(batch):
            rows = [dict(r) for r in part]
            if table.name == "memories":
                rows = _memory_rows(rows, target_dim, report)
            dst.execute(_upsert(table, dialect, rows))
            if table.name == "memories":
                _index_words(dst, rows)
            if commit:
                dst.commit()
        if dialect == "postgresql":
            _reset_sequences(dst, table)
        if table.name == "memories" and report.vectors_copied:
            with Session(bind=dst) as t:
                recall_backend(t).recenter(t)  # the center of the copied vectors, every row re-quantized
                t.flush()
        if commit:
            dst.commit()
        done.target_rows = _count(dst, table)
        report.tables.append(done)
        say(
            f"{table.name}: {done.source_rows} row(s) copied, the target has {done.target_rows}"
            + ("" if done.ok else " (MISMATCH)")
        )


def _columns(conn: Connection) -> dict[str, set[str]]:
    """Each table's columns as the database has them (an older schema revision may lack some)."""
    present = set(inspect(conn).get_table_names())
    out: dict[str, set[str]] = {}
    for table in Base.metadata.sorted_tables:  # by a query's columns: reflection warns of pgvector's type
        if table.name in present:
            out[table.name] = set(conn.execute(select(text("*")).select_from(table).limit(0)).keys())
    return out


def _target_dim(conn: Connection) -> int | None:
    with Session(bind=conn) as s:
        return recall_backend(s).vec_dim(s)


def _memory_rows(rows: list[dict[str, Any]], dim: int | None, report: CopyReport) -> list[dict[str, Any]]:
    for row in rows:
        report.memories_indexed += 1
        blob = row.get("embedding")
        if blob is None:
            continue
        if dim is None or len(blob) != dim * 4:
            row["embedding"] = None
            row["embedder"] = None  # the next reembed at start makes it again
            report.vectors_dropped += 1
        else:
            report.vectors_copied += 1
    return rows


def _index_words(conn: Connection, rows: list[dict[str, Any]]) -> None:
    with Session(bind=conn) as s:
        backend = recall_backend(s)
        for row in rows:
            backend.index_words(
                s,
                row["id"],
                row["user_id"],
                said_text(row["content"], row.get("speaker")),
                row.get("context"),
            )
        s.flush()
