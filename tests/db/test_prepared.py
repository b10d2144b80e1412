"""The turn's statements run on the driver's cursor (db/prepared.py): what they write and read is what
SQLAlchemy's own execution writes and reads, on SQLite and PostgreSQL (their types' processors differ)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import Engine, bindparam, insert, select
from sqlalchemy.exc import IntegrityError

from db.conversation_statements import HISTORY, HISTORY_RUN, INSERT_MESSAGE_RUN, MESSAGES
from db.conversations import Conversations
from db.engine import make_sessionmaker
from db.models import UpdateSeen
from db.prepared import Prepared
from tests.support.sql import statements

SEEN = UpdateSeen.__table__
TOOL_CALLS = [{"id": "c1", "type": "function", "function": {"name": "run_code", "arguments": '{"a": "é"}'}}]


def _message(session_id: str, **changes: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "session_id": session_id,
        "user_id": 1,
        "chat_id": 1,
        "role": "assistant",
        "content": "Here it is: \u201cdone\u201d",
        "tool_calls": TOOL_CALLS,
        "tool_call_id": None,
        "tool_name": None,
        "status": "done",
        "created_at": datetime(2026, 11, 26, 21, 40, 5, 123456, tzinfo=UTC),
        "tg_message_id": 2**40,
    }
    row.update(changes)
    return row


def test_a_row_written_on_the_cursor_reads_back_as_sqlalchemy_reads_it_and_the_other_way(
    engine: Engine,
) -> None:
    session = Conversations(make_sessionmaker(engine), engine).current_session(1, 1)
    with engine.begin() as conn:
        mine = INSERT_MESSAGE_RUN.scalar(conn, _message(session.id))
        theirs = conn.execute(
            insert(MESSAGES).returning(MESSAGES.c.id), _message(session.id, tool_calls=None, content=None)
        ).scalar_one()
    assert isinstance(mine, int) and theirs == mine + 1
    params = {"sid": session.id, "lim": 10}
    with engine.connect() as conn:
        by_sqlalchemy = [tuple(r) for r in conn.execute(HISTORY, params)]
        on_the_cursor = HISTORY_RUN.rows(conn, params)
        created = conn.execute(select(MESSAGES.c.created_at).where(MESSAGES.c.id == mine)).scalar_one()
    assert on_the_cursor == by_sqlalchemy
    assert on_the_cursor[1][:4] == (mine, "assistant", "Here it is: \u201cdone\u201d", TOOL_CALLS)
    assert on_the_cursor[0][2:4] == (None, None)  # a NULL content and no tool calls stay None
    assert created == datetime(2026, 11, 26, 21, 40, 5, 123456, tzinfo=UTC)


def test_a_duplicate_is_sqlalchemys_integrity_error_and_the_transaction_rolls_back(engine: Engine) -> None:
    seen = Prepared(insert(SEEN), keys=("bot_id", "update_id", "seen_at"))
    row = {"bot_id": 7, "update_id": 1, "seen_at": datetime.now(UTC)}
    with pytest.raises(IntegrityError), engine.begin() as conn:
        seen.run(conn, row)
        seen.run(conn, {**row, "update_id": 2})
        seen.run(conn, row)  # the same update again: its primary key is taken
    with engine.begin() as conn:  # nothing of the failed transaction was kept; the pool's connection works
        assert conn.execute(select(SEEN.c.update_id)).all() == []
        assert seen.run(conn, row) == 1


def test_the_engines_cursor_events_see_its_statements(engine: Engine) -> None:
    with statements(engine) as seen, engine.connect() as conn:
        HISTORY_RUN.rows(conn, {"sid": "none", "lim": 5})
    assert len(seen) == 1 and seen[0].lstrip().upper().startswith("SELECT")


def test_what_it_cannot_run_exactly_is_refused_when_first_used(engine: Engine) -> None:
    expanding = Prepared(select(MESSAGES.c.id).where(MESSAGES.c.id.in_(bindparam("ids", expanding=True))))
    # An INSERT that leaves a column with a Python-side default to SQLAlchemy (messages.status has one).
    defaulted = Prepared(insert(MESSAGES), keys=("session_id", "user_id", "chat_id", "role", "content"))
    with engine.connect() as conn:
        with pytest.raises(ValueError, match="final SQL at compile time"):
            expanding.rows(conn, {"ids": [1, 2]})
        with pytest.raises(ValueError, match="must be given the columns"):
            row = {"session_id": "s", "user_id": 1, "chat_id": 1, "role": "user", "content": ""}
            defaulted.run(conn, row)
