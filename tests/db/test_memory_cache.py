"""What every turn's prompt reads of a user's memories, kept between turns (db/memory_cache.py): the prompt
holds what the database holds, whoever changed it, and an unchanged user costs one indexed read."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import Engine, delete, update

from db import connections
from db.engine import make_sessionmaker
from db.memories import NewMemory, insert_memory
from db.memory_cache import PromptMemories
from db.models import Memory, utcnow
from tests.support.sql import statements

USER = 5
SESSION = "s-1"


def _add(engine: Engine, content: str, layer: str = "session", expires_at: datetime | None = None) -> None:
    with make_sessionmaker(engine).begin() as s:
        new = NewMemory(
            user_id=USER,
            layer=layer,
            category="fact",
            content=content,
            now=utcnow(),
            session_id=SESSION if layer == "session" else None,
            expires_at=expires_at,
        )
        insert_memory(s, new)


def _read(cache: PromptMemories, engine: Engine, now: datetime | None = None) -> tuple[bool, list[str]]:
    with connections.read(engine) as conn:
        has, rows = cache.read(conn, USER, SESSION, now or utcnow())
    return has, [r.content for r in rows]


def test_an_unchanged_user_costs_one_read(engine: Engine) -> None:
    cache = PromptMemories()
    assert _read(cache, engine) == (False, [])  # no memory yet
    _add(engine, "Working on the tax return")
    assert _read(cache, engine) == (False, ["Working on the tax return"])
    with statements(engine) as seen:
        assert _read(cache, engine) == (False, ["Working on the tax return"])
    assert len(seen) == 1 and "memory_revisions" in seen[0]


def test_what_another_process_changes_is_in_the_next_read(engine: Engine, other_engine: Engine) -> None:
    cache = PromptMemories()
    _add(engine, "Flight on Friday")
    assert _read(cache, engine) == (False, ["Flight on Friday"])
    _add(other_engine, "Lives in Porto", layer="long")  # a long-term memory saved there: worth a recall now
    assert _read(cache, engine) == (True, ["Flight on Friday"])
    with other_engine.begin() as conn:  # an edit there
        conn.execute(
            update(Memory).where(Memory.content == "Flight on Friday").values(content="Flight moved")
        )
    assert _read(cache, engine) == (True, ["Flight moved"])
    with other_engine.begin() as conn:  # the user's erase there
        conn.execute(delete(Memory).where(Memory.user_id == USER))
    assert _read(cache, engine) == (False, [])


def test_a_session_memory_that_expired_since_is_left_out(engine: Engine) -> None:
    cache = PromptMemories()
    soon = utcnow() + timedelta(minutes=5)
    _add(engine, "Call back in five minutes", expires_at=soon)
    _add(engine, "Prefers short answers")
    assert _read(cache, engine)[1] == ["Call back in five minutes", "Prefers short answers"]
    with statements(engine) as seen:
        later = _read(cache, engine, now=soon + timedelta(seconds=1))
    assert later == (False, ["Prefers short answers"])
    assert len(seen) == 1  # nothing changed in the database: time alone


def test_when_the_kept_rows_filled_the_limit_an_expired_one_makes_room_for_the_next(engine: Engine) -> None:
    cache = PromptMemories()
    soon = utcnow() + timedelta(minutes=5)
    _add(engine, "Call back in five minutes", expires_at=soon)
    _add(engine, "Prefers short answers")
    _add(engine, "Writes in Portuguese")

    def read(now: datetime) -> list[str]:
        with connections.read(engine) as conn:
            return [r.content for r in cache.read(conn, USER, SESSION, now, limit=2)[1]]

    assert read(utcnow()) == ["Call back in five minutes", "Prefers short answers"]
    assert read(soon + timedelta(seconds=1)) == ["Prefers short answers", "Writes in Portuguese"]
