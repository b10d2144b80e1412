"""The column types and the declarative base every model shares."""

from __future__ import annotations

import struct
import uuid
from datetime import UTC, datetime
from typing import Any, ClassVar

from sqlalchemy import (
    JSON,
    DateTime,
    LargeBinary,
    TypeDecorator,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase


def utcnow() -> datetime:
    """Now, timezone-aware UTC."""
    return datetime.now(UTC)


def new_id() -> str:
    """A new random UUID as text."""
    return str(uuid.uuid4())


class UTCDateTime(TypeDecorator[datetime]):
    """Stores naive UTC, returns aware UTC: SQLite keeps no time zone."""

    impl = DateTime
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC).replace(tzinfo=None)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return None if value is None else value.replace(tzinfo=UTC)


class Embedding(TypeDecorator[bytes]):
    """A vector as float32 little-endian bytes in Python: a BLOB on SQLite, a pgvector `vector` on PostgreSQL.

    Every caller reads and writes bytes (db.memory_vectors.f32), so the write path is the same on both
    databases.
    """

    impl = LargeBinary
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> Any:
        if dialect.name == "postgresql":
            from pgvector.sqlalchemy import VECTOR  # imported here: SQLite users need no pgvector

            return dialect.type_descriptor(VECTOR())
        return dialect.type_descriptor(LargeBinary())

    def process_bind_param(self, value: bytes | None, dialect: Dialect) -> Any:
        if value is None or dialect.name != "postgresql":
            return value
        return list(struct.unpack(f"<{len(value) // 4}f", value))

    def process_result_value(self, value: Any, dialect: Dialect) -> bytes | None:
        if value is None or dialect.name != "postgresql":
            return None if value is None else bytes(value)
        return struct.pack(f"<{len(value)}f", *(float(x) for x in value))


class Base(DeclarativeBase):
    """Declarative base of every table."""

    type_annotation_map: ClassVar[dict[Any, Any]] = {
        datetime: UTCDateTime(),
        dict[str, Any]: JSON,
        list[Any]: JSON,
    }
