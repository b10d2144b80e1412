"""The turn path builds records from rows by position (`Record(*row)`: a `Prepared` statement's rows are
tuples, db/prepared.py): each such statement's columns must come in its record's field order. This pins
them; reordering a record's fields or a select's columns fails here (docs/database.md)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import pytest
from sqlalchemy import Table

from db import memories, memory_search
from db.conversation_records import SessionInfo, StoredMessage
from db.conversation_statements import (
    HISTORY_BETWEEN,
    HISTORY_RUN,
    OPEN_CHAT_SESSION_RUN,
    OPEN_SESSION_RUN,
    TOUCH_OPEN_CHAT_SESSION_RUN,
    TOUCH_OPEN_SESSION_RUN,
)
from db.media import _FOR_MESSAGES_RUN, MediaRow
from db.models import Message
from db.rows import column_names, columns_for
from db.runtime import inbox
from db.runtime.inbox import Entry, Queued
from db.speakers import Speaker


def _fields(record: type, *, without: tuple[str, ...] = ()) -> list[str]:
    return [f.name for f in fields(record) if f.init and f.name not in without]


# A waiting message's columns: its id and arrival, then its entry's (the speaker's first). `inbox.queued`
# builds the nested record from them by position.
QUEUED = ["id", "received_at", *_fields(Speaker), *_fields(Entry, without=("speaker",))]


# (statement, the columns it must give in order): where a caller does Record(*row) or Record(*row[:-1]).
CASES: dict[str, tuple[Any, list[str]]] = {
    "history": (HISTORY_RUN.statement, _fields(StoredMessage, without=("created_at",))),
    "history between": (HISTORY_BETWEEN, _fields(StoredMessage, without=("created_at",))),
    "open session": (OPEN_SESSION_RUN.statement, _fields(SessionInfo)),
    "open chat session": (OPEN_CHAT_SESSION_RUN.statement, _fields(SessionInfo)),
    "touch open session": (TOUCH_OPEN_SESSION_RUN.statement, [*_fields(SessionInfo), "history_rev"]),
    "touch open chat session": (
        TOUCH_OPEN_CHAT_SESSION_RUN.statement,
        [*_fields(SessionInfo), "history_rev"],
    ),
    "inbox waiting": (inbox._WAITING_IN_RUN.statement, QUEUED),
    "inbox all": (inbox._QUEUED, QUEUED),
    "session memories": (memories._SESSION_ROWS_RUN.statement, _fields(memories.MemoryRow)),
    "memories by id": (memory_search._ROWS_BY_ID, _fields(memories.MemoryRow)),
    "media of messages": (_FOR_MESSAGES_RUN.statement, _fields(MediaRow, without=("created_at",))),
}


@pytest.mark.parametrize("case", CASES)
def test_a_turn_path_statement_gives_its_records_fields_in_order(case: str) -> None:
    statement, expected = CASES[case]
    assert column_names(statement) == expected


def test_a_waiting_messages_row_is_read_into_the_fields_of_its_name() -> None:
    row = column_names(inbox._WAITING_IN_RUN.statement)  # each value: the name of its column
    q = inbox.queued(row)
    entry, speaker = q.entry, q.entry.speaker
    read = {
        **{f: getattr(q, f) for f in _fields(Queued, without=("entry",))},
        **{f: getattr(speaker, f) for f in _fields(Speaker)},
        **{f: getattr(entry, f) for f in _fields(Entry, without=("speaker",))},
    }
    assert read == {name: name for name in QUEUED}


MESSAGES: Table = Message.__table__  # type: ignore[assignment]


def test_only_a_records_last_defaulted_fields_can_be_left_out() -> None:
    assert [c.key for c in columns_for(MESSAGES, StoredMessage, leave=("created_at",))][-1] == "status"
    with pytest.raises(ValueError, match="only its last fields"):
        columns_for(MESSAGES, StoredMessage, leave=("role",))  # every later column would shift
    with pytest.raises(ValueError, match="needs a default"):
        columns_for(
            MESSAGES,
            StoredMessage,
            leave=("role", "content", "tool_calls", "tool_call_id", "tool_name", "status", "created_at"),
        )
