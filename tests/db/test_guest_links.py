"""The questions behind "continue in private" links and inline results (db/guest_links.py): used once, by
their asker only, before they expire; expired rows go as new ones are made. On both databases."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from db.guest_links import INLINE, PRIVATE, GuestLinks
from db.models import GuestLink
from tests.support.databases import both_databases

db_kind = both_databases()  # an UPDATE ... WHERE claim and timestamps: both dialects


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def test_a_token_is_used_once_by_its_asker_before_it_expires(db_sessions: sessionmaker[Session]) -> None:
    clock = Clock()
    links = GuestLinks(db_sessions, clock)
    token = links.make(7, PRIVATE, "what is the capital of France?", ttl_s=600)
    assert re.fullmatch(r"[A-Za-z0-9_-]{1,64}", token)  # a valid /start parameter

    assert links.take(token, PRIVATE, 8) is None  # someone else's link
    assert links.take(token, INLINE, 7) is None  # not an inline result's token
    assert links.peek(token, PRIVATE) is not None
    found = links.take(token, PRIVATE, 7)
    assert found is not None and found.question == "what is the capital of France?" and found.user_id == 7
    assert links.take(token, PRIVATE, 7) is None  # used
    assert links.peek(token, PRIVATE) is None

    late = links.make(7, INLINE, "later", ttl_s=600)
    clock.now += timedelta(seconds=601)
    assert links.take(late, INLINE, 7) is None  # expired

    links.make(7, PRIVATE, "new", ttl_s=600)  # expired rows are deleted meanwhile
    with db_sessions() as s:
        assert s.execute(select(func.count()).select_from(GuestLink)).scalar_one() == 1


def test_an_unknown_kind_is_refused(db_sessions: sessionmaker[Session]) -> None:
    with pytest.raises(ValueError, match="unknown guest link kind"):
        GuestLinks(db_sessions).make(7, "public", "x", ttl_s=60)
