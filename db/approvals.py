"""Tool calls waiting for their user's approval, and the tools a person always allows in a chat
(migrations 0022, 0025).

The turn that asks writes a "pending" row and reads its status until it changes; the process that receives
the button press (any process on the database) writes the decision, once: the first decision wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Engine, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from db.engine import engine_for
from db.models import Approval, ApprovalAlways, User, utcnow

PENDING = "pending"
DECISIONS = ("approved", "denied", "timeout", "cancelled")


@dataclass(frozen=True)
class ApprovalRow:
    """One approval request as stored."""

    id: int
    chat_id: int
    user_id: int
    tool: str
    summary: str
    status: str
    decided_by: int | None
    decided_at: datetime | None
    created_at: datetime


def _row(a: Approval) -> ApprovalRow:
    return ApprovalRow(
        a.id, a.chat_id, a.user_id, a.tool, a.summary, a.status, a.decided_by, a.decided_at, a.created_at
    )


class Approvals:
    """The approvals tables of one database."""

    def __init__(self, sessions: sessionmaker[Session], engine: Engine) -> None:
        self._sm = sessions
        self._postgres = engine_for(sessions, engine).dialect.name == "postgresql"

    @property
    def over_network(self) -> bool:
        """Whether calls wait on a database server (then they run off the event loop)."""
        return self._postgres

    def ask(self, chat_id: int, user_id: int, tool: str, summary: str) -> int:
        """Store a pending request that only `user_id` may decide; returns its id."""
        with self._sm.begin() as s:
            row = Approval(chat_id=chat_id, user_id=user_id, tool=tool, summary=summary, status=PENDING)
            s.add(row)
            s.flush()
            return row.id

    def get(self, approval_id: int) -> ApprovalRow | None:
        """The request, or None."""
        with self._sm() as s:
            row = s.get(Approval, approval_id)
            return _row(row) if row is not None else None

    def status(self, approval_id: int) -> str | None:
        """The request's status ("pending" until decided), or None when there is no such request."""
        with self._sm() as s:
            return s.scalar(select(Approval.status).where(Approval.id == approval_id))

    def decide(self, approval_id: int, status: str, by: int | None, *, always: bool = False) -> bool:
        """Record a decision if the request still waits (the first decision wins); with `always`, the
        chat allows the tool from now on, in the same transaction. Returns whether this decision counted."""
        if status not in DECISIONS:
            raise ValueError(f"unknown decision {status!r}")
        now = utcnow()
        with self._sm.begin() as s:
            done = s.execute(
                update(Approval)
                .where(Approval.id == approval_id, Approval.status == PENDING)
                .values(status=status, decided_by=by, decided_at=now)
            )
            if not done.rowcount:  # type: ignore[attr-defined]
                return False
            if always and by is not None:
                row = s.get(Approval, approval_id)
                assert row is not None
                if s.get(ApprovalAlways, (row.chat_id, row.tool, by)) is None:
                    s.add(ApprovalAlways(chat_id=row.chat_id, tool=row.tool, allowed_by=by))
        return True

    def allowed_always(self, chat_id: int, tool: str, user_id: int) -> bool:
        """Whether `user_id` allowed the tool for their own calls in the chat with "Always in this chat"
        (per person: in a group, one member's choice is not the others')."""
        with self._sm() as s:
            return s.get(ApprovalAlways, (chat_id, tool, user_id)) is not None

    def allow_always(self, chat_id: int, tool: str, by: int) -> None:
        """Allow `by`'s calls of the tool in the chat from now on (idempotent)."""
        try:
            with self._sm.begin() as s:
                if s.get(ApprovalAlways, (chat_id, tool, by)) is None:
                    s.add(ApprovalAlways(chat_id=chat_id, tool=tool, allowed_by=by))
        except IntegrityError:  # another process allowed it at the same moment
            pass

    def name_of(self, user_id: int) -> str:
        """How to call a user in a chat: their first name, else @username, else their id."""
        with self._sm() as s:
            row = s.execute(select(User.first_name, User.username).where(User.id == user_id)).first()
        if row is not None and row.first_name:
            return str(row.first_name)
        if row is not None and row.username:
            return f"@{row.username}"
        return f"user {user_id}"
