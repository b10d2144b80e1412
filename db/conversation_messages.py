"""The message log of the conversation history: storing messages and tool results, their statuses, and
loading a session's history (the base of db/conversations.py's Conversations)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, select, update

from db import connections
from db.conversation_records import StoredMessage, UserMessage
from db.conversation_statements import (
    HISTORY_BETWEEN,
    HISTORY_REVISION_RUN,
    HISTORY_RUN,
    INSERT_MESSAGE_RUN,
    MESSAGES,
    SET_STATUS_RUN,
    SUPERSEDE,
    TOUCH_SESSION_RUN,
)
from db.history_cache import HistoryCache
from db.models import utcnow
from db.usage import LLMCallRecord, insert_llm_call


class MessageLog:
    """Queries over the messages of sessions."""

    _history: HistoryCache  # the histories read here, with their revision (db/history_cache.py)

    _engine: Engine

    @staticmethod
    def _message_row(
        session_id: str, user_id: int, chat_id: int, role: str, content: str | None, now: datetime
    ) -> dict[str, Any]:
        return {
            "session_id": session_id,
            "user_id": user_id,
            "chat_id": chat_id,
            "role": role,
            "content": content,
            "tool_calls": None,
            "tool_call_id": None,
            "tool_name": None,
            "status": "done",
            "created_at": now,
            "tg_message_id": None,
        }

    @staticmethod
    def _insert_message(conn: Connection, row: dict[str, Any], now: datetime, touch: bool = True) -> int:
        msg_id = int(INSERT_MESSAGE_RUN.scalar(conn, row))
        if touch:
            TOUCH_SESSION_RUN.run(conn, {"sid": row["session_id"], "at": now})
        return msg_id

    def add_message(
        self,
        session_id: str,
        user_id: int,
        chat_id: int,
        role: str,
        content: str | None,
        *,
        tool_calls: list[dict[str, Any]] | None = None,
        tool_call_id: str | None = None,
        tool_name: str | None = None,
        status: str = "done",
        tg_message_id: int | None = None,
        llm_call: LLMCallRecord | None = None,
    ) -> int:
        """Store one message and mark the session active (with `llm_call`, the usage of the request that
        wrote it, in the same transaction); returns its id."""
        now = utcnow()
        # Core statements on the table, not the ORM: this runs several times per turn on the event loop
        # (0.5 ms against 2 ms for the ORM path, measured with bench/bench_chat.py's helpers).
        row = self._message_row(session_id, user_id, chat_id, role, content, now)
        row.update(
            tool_calls=tool_calls,
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            status=status,
            tg_message_id=tg_message_id,
        )
        with self._engine.begin() as conn:
            msg_id = self._insert_message(conn, row, now)
            if llm_call is not None:
                insert_llm_call(conn, llm_call)
            return msg_id

    def add_tool_results(
        self, session_id: str, user_id: int, chat_id: int, results: Sequence[tuple[str, str, str]]
    ) -> None:
        """Store one round's tool results ((content, call id, tool name), in the order of the calls) in one
        transaction."""
        now = utcnow()
        rows = []
        for content, call_id, name in results:
            row = self._message_row(session_id, user_id, chat_id, "tool", content, now)
            row.update(tool_call_id=call_id, tool_name=name)
            rows.append(row)
        if rows:
            with self._engine.begin() as conn:
                for row in rows:  # one by one: the ids keep the order of the calls
                    self._insert_message(conn, row, now, touch=False)
                TOUCH_SESSION_RUN.run(conn, {"sid": session_id, "at": now})

    def set_status(self, message_id: int, status: str) -> None:
        """Change a user message's status (pending -> answered | failed | interrupted | refused)."""
        with self._engine.begin() as conn:
            SET_STATUS_RUN.run(conn, {"mid": message_id, "new_status": status})

    def set_statuses(self, message_ids: list[int], status: str) -> None:
        """Change the status of several messages at once (the user messages of one turn)."""
        if message_ids:
            with self._engine.begin() as conn:
                SET_STATUS_RUN.run_many(conn, [{"mid": i, "new_status": status} for i in message_ids])

    def supersede_answer(self, session_id: str, user_message_id: int) -> int:
        """Mark the answer to a user message (every later non-user message of the session) superseded:
        kept in the database, left out of the history the model sees. Returns how many rows changed."""
        with self._engine.begin() as conn:
            result = conn.execute(SUPERSEDE, {"sid": session_id, "after": user_message_id})
            return int(result.rowcount or 0)

    def _user_message(self, conn: Any, row: Any) -> UserMessage:
        later = conn.execute(
            select(MESSAGES.c.id)
            .where(MESSAGES.c.session_id == row.session_id, MESSAGES.c.id > row.id, MESSAGES.c.role == "user")
            .limit(1)
        ).first()
        return UserMessage(
            row.id,
            row.session_id,
            row.user_id,
            row.chat_id,
            row.content or "",
            row.status,
            row.tg_message_id,
            later is None,
        )

    _USER_COLUMNS = (
        MESSAGES.c.id,
        MESSAGES.c.session_id,
        MESSAGES.c.user_id,
        MESSAGES.c.chat_id,
        MESSAGES.c.content,
        MESSAGES.c.status,
        MESSAGES.c.tg_message_id,
    )

    def last_user_message(self, session_id: str) -> UserMessage | None:
        """The newest user message of a session (what /retry answers again)."""
        with self._engine.connect() as conn:
            row = conn.execute(
                select(*self._USER_COLUMNS)
                .where(MESSAGES.c.session_id == session_id, MESSAGES.c.role == "user")
                .order_by(MESSAGES.c.id.desc())
                .limit(1)
            ).first()
            return None if row is None else self._user_message(conn, row)

    def find_by_telegram_id(self, chat_id: int, tg_message_id: int) -> UserMessage | None:
        """The stored user message that Telegram knows as `tg_message_id` in this chat, if any."""
        with self._engine.connect() as conn:
            row = conn.execute(
                select(*self._USER_COLUMNS)
                .where(
                    MESSAGES.c.chat_id == chat_id,
                    MESSAGES.c.tg_message_id == tg_message_id,
                    MESSAGES.c.role == "user",
                )
                .order_by(MESSAGES.c.id.desc())
                .limit(1)
            ).first()
            return None if row is None else self._user_message(conn, row)

    def edit_message(self, message_id: int, content: str) -> None:
        """Replace a user message's text with the user's edit (the edit time is kept)."""
        with self._engine.begin() as conn:
            conn.execute(
                update(MESSAGES)
                .where(MESSAGES.c.id == message_id)
                .values(content=content, edited_at=utcnow())
            )

    def messages(self, session_id: str, limit: int = 500, since_id: int | None = None) -> list[StoredMessage]:
        """The newest `limit` messages of a session, oldest first (without `created_at`, to stay cheap),
        and every message from `since_id` on even past the limit (the current turn is always whole)."""
        with connections.read(self._engine) as conn:
            # The revision before the rows: rows newer than it are read again next time, never missed.
            revision = HISTORY_REVISION_RUN.scalar(conn, {"sid": session_id})
            stored = None if revision is None else self._history.get(session_id, revision, limit)
            if stored is None:
                rows = HISTORY_RUN.rows(conn, {"sid": session_id, "lim": limit})
                rows.reverse()
                stored = [StoredMessage(*row) for row in rows]
                if revision is not None:
                    self._history.put(session_id, revision, limit, stored)
            if since_id is not None and stored and stored[0].id > since_id:
                params = {"sid": session_id, "first": since_id, "before": stored[0].id}
                stored = [*(StoredMessage(*r) for r in conn.execute(HISTORY_BETWEEN, params)), *stored]
        return stored
