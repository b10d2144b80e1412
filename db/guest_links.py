"""Questions behind short-lived tokens (migration 0028): made when a guest or inline query is answered, used
once by the "continue in private" link or the inline result's button, from any process on the database."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session, sessionmaker

from db.models import GuestLink, utcnow

PRIVATE = "private"  # /start <token> in the private chat runs the question there
INLINE = "inline"  # an inline query's result, answered in the chat it was posted to
KINDS = (PRIVATE, INLINE)


@dataclass(frozen=True)
class Question:
    """A question taken from its token: who asked it, and what."""

    user_id: int
    kind: str
    question: str


class GuestLinks:
    """The guest_links table of one database."""

    def __init__(self, sessions: sessionmaker[Session], clock: Callable[[], datetime] = utcnow) -> None:
        self._sm = sessions
        self.clock = clock

    def make(self, user_id: int, kind: str, question: str, ttl_s: float) -> str:
        """Store the question for `ttl_s` seconds; returns its token (fits a /start parameter: at most 64
        of A-Z, a-z, 0-9, _ and -). Expired rows go in the same transaction."""
        if kind not in KINDS:
            raise ValueError(f"unknown guest link kind {kind!r}")
        now = self.clock()
        token = secrets.token_urlsafe(16)  # 22 characters of [A-Za-z0-9_-]
        with self._sm.begin() as s:
            s.execute(delete(GuestLink).where(GuestLink.expires_at < now))
            s.add(
                GuestLink(
                    token=token,
                    user_id=user_id,
                    kind=kind,
                    question=question,
                    created_at=now,
                    expires_at=now + timedelta(seconds=ttl_s),
                )
            )
        return token

    def peek(self, token: str, kind: str) -> Question | None:
        """The question behind a token still valid and unused, without using it."""
        now = self.clock()
        with self._sm() as s:
            row = s.execute(
                select(GuestLink).where(
                    GuestLink.token == token,
                    GuestLink.kind == kind,
                    GuestLink.used_at.is_(None),
                    GuestLink.expires_at >= now,
                )
            ).scalar_one_or_none()
            return None if row is None else Question(row.user_id, row.kind, row.question)

    def take(self, token: str, kind: str, user_id: int) -> Question | None:
        """Use the token once: its question when it is `user_id`'s, of `kind`, unused and not expired (the
        first of two processes that try wins); None otherwise."""
        now = self.clock()
        with self._sm.begin() as s:
            taken = s.execute(
                update(GuestLink)
                .where(
                    GuestLink.token == token,
                    GuestLink.kind == kind,
                    GuestLink.user_id == user_id,
                    GuestLink.used_at.is_(None),
                    GuestLink.expires_at >= now,
                )
                .values(used_at=now)
            )
            if taken.rowcount != 1:  # type: ignore[attr-defined]
                return None
            row = s.execute(select(GuestLink).where(GuestLink.token == token)).scalar_one()
            return Question(row.user_id, row.kind, row.question)
