"""Alembic environment: built from db's engine factory, so sqlite-vec is loaded here too."""

from __future__ import annotations

from typing import Any

from alembic import context
from sqlalchemy import text

from db.engine import make_engine
from db.migrate import is_managed_table, url_from_environment
from db.models import Base, UTCDateTime

config = context.config
# Columns, indexes and tables that migrations create by raw SQL, not models: PostgreSQL's own
# (db/recall_postgres.py), and 0024's memory revisions (db/memory_cache.py), kept by triggers.
NOT_MODELS = frozenset(
    {
        "content_tsv",
        "ix_memories_words",
        "embedding_bits",
        "ix_memories_user_bits",
        "memories_vec_center",
        "memories_vec_versions",
        "memories_vec_log",
        "memory_revisions",
    }
)
url = config.attributes.get("database_url") or url_from_environment()


def run_migrations() -> None:
    engine = make_engine(url)
    if engine.dialect.name == "postgresql":
        import pgvector.sqlalchemy  # noqa: F401  # registers `vector` for reflection (alembic check)
    with engine.connect() as connection:
        virtual = (
            {
                row[0]
                for row in connection.execute(
                    text("SELECT name FROM sqlite_master WHERE type='table' AND sql LIKE 'CREATE VIRTUAL%'")
                )
            }
            if engine.dialect.name == "sqlite"
            else set()
        )

        connection.commit()  # end the autobegun read so Alembic owns (and commits) its transaction

        def include_name(name: str | None, type_: str, parent_names: Any) -> bool:
            if name in NOT_MODELS:  # made by raw SQL (above)
                return False
            return type_ != "table" or is_managed_table(name, virtual)

        def render_item(type_: str, obj: Any, autogen_context: Any) -> str | bool:
            # Migrations must not import application code: store UTC datetimes as plain DATETIME.
            if type_ == "type" and isinstance(obj, UTCDateTime):
                return "sa.DateTime()"
            return False

        context.configure(
            connection=connection,
            target_metadata=Base.metadata,
            render_as_batch=True,  # SQLite cannot ALTER most things in place
            include_name=include_name,
            compare_type=True,
            render_item=render_item,
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations()
