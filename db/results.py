"""Stored tool results (read by pages) and the code runs' full output, each readable only by its owner."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import delete, func, select
from sqlalchemy.orm import Session, sessionmaker

from db.models import ChatSession, CodeExecution, StoredResult


@dataclass(frozen=True)
class ResultText:
    """A stored text and where it came from."""

    handle: str
    tool: str
    text: str  # the whole text, or the slice asked for
    untrusted: bool
    total: int  # characters of the whole text


class ToolResults:
    """Writes and reads `tool_results`; results of ended sessions are gone."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sm = sessions

    def store(
        self, *, user_id: int, session_id: str, tool: str, call_id: str, text: str, untrusted: bool
    ) -> str:
        """Keep `text`; returns its handle. Results of sessions that have ended are dropped on the way."""
        handle = "r-" + uuid.uuid4().hex[:16]
        with self._sm.begin() as s:
            ended = select(ChatSession.id).where(ChatSession.ended_at.is_not(None))
            s.execute(delete(StoredResult).where(StoredResult.session_id.in_(ended)))
            s.add(
                StoredResult(
                    id=handle,
                    user_id=user_id,
                    session_id=session_id,
                    tool=tool,
                    call_id=call_id,
                    content=text,
                    chars=len(text),
                    untrusted=untrusted,
                )
            )
        return handle

    def read(
        self, handle: str, user_id: int, chat_id: int, start: int = 0, length: int | None = None
    ) -> ResultText | None:
        """The user's stored result from this chat (or `length` characters of it from `start`), or None:
        unknown, another user's or chat's (a private result never reaches a group), or its session ended.
        Slicing happens in SQLite, so a page does not load the whole text."""
        text = (
            StoredResult.content if length is None else func.substr(StoredResult.content, start + 1, length)
        )
        with self._sm() as s:
            row = s.execute(
                select(StoredResult.tool, text.label("text"), StoredResult.untrusted, StoredResult.chars)
                .join(ChatSession, ChatSession.id == StoredResult.session_id)
                .where(
                    StoredResult.id == handle,
                    StoredResult.user_id == user_id,
                    ChatSession.chat_id == chat_id,
                    ChatSession.ended_at.is_(None),
                )
            ).first()
        return (
            None
            if row is None
            else ResultText(handle, row.tool, row.text or "", bool(row.untrusted), row.chars)
        )

    def execution_output(
        self,
        execution_id: str,
        user_id: int,
        chat_id: int,
        stream: str,
        start: int = 0,
        length: int | None = None,
    ) -> ResultText | None:
        """stdout or stderr of one of the user's code runs in this chat (or a slice), as the execution log
        keeps it."""
        column = CodeExecution.stderr if stream == "stderr" else CodeExecution.stdout
        text = column if length is None else func.substr(column, start + 1, length)
        with self._sm() as s:
            row = s.execute(
                select(text.label("text"), func.length(column).label("chars"))
                .join(ChatSession, ChatSession.id == CodeExecution.session_id)
                .where(
                    CodeExecution.id == execution_id,
                    CodeExecution.user_id == user_id,
                    ChatSession.chat_id == chat_id,
                )
            ).first()
        return (
            None if row is None else ResultText(execution_id, "code", row.text or "", False, row.chars or 0)
        )
