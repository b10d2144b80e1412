"""Users, sessions and messages: the conversation history every turn is built from.

Its statements are in db/conversation_statements.py, its records in db/conversation_records.py."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, func, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from db import connections
from db.conversation_messages import MessageLog
from db.conversation_records import (
    OpenedTurn,
    SessionInfo,
    StoredMessage,
    TurnClosing,
    TurnOpening,
    session_info,
)
from db.conversation_statements import (
    CHAT_MODEL,
    INSERT_SESSION,
    OPEN_CHAT_SESSION_RUN,
    OPEN_SESSION_RUN,
    SESSIONS,
    SET_STATUS_RUN,
    SUPERSEDE,
    TIMEZONE,
    TOUCH_OPEN_CHAT_SESSION_RUN,
    TOUCH_OPEN_SESSION_RUN,
    USERS,
)
from db.engine import engine_for
from db.history_cache import HistoryCache
from db.models import ChatSession, ChatSettings, User, new_id, utcnow
from db.runtime.inbox import Inbox, discard_in, move_into_history
from db.runtime.store import clear_turn, publish_turn
from db.speakers import chat_type_of
from db.topics import Topics
from db.turn_info import insert_turn_info
from db.usage import insert_llm_call

LAST_SEEN_RESOLUTION = timedelta(minutes=1)


def _open_key(user_id: int, chat_id: int, chat_type: str | None) -> tuple[int, int | None]:
    """A group's session is the chat's; a private chat's is its user's (as `_open_session` finds them)."""
    return (chat_id, None) if chat_type_of(user_id, chat_id, chat_type) != "private" else (chat_id, user_id)


class Conversations(MessageLog):
    """Queries over users, sessions and messages."""

    def __init__(self, sessions: sessionmaker[Session], engine: Engine) -> None:
        self._sm = sessions
        self._engine = engine_for(sessions, engine)
        self.inbox = Inbox(self._engine)  # messages waiting for their turn; a turn stores them from there
        # Forum topics are conversations of their own: their keys stand in for chat ids (db/topics.py).
        self.topics = Topics(self._engine)
        # Small per-process caches of the hot path; the bot is the only writer of these columns.
        self._seen: dict[int, tuple[tuple[str | None, str | None], datetime]] = {}
        self._timezones: dict[int, str | None] = {}
        # last_summary() per (user, chat); reset by end_session
        self._summaries: dict[tuple[int, int], tuple[str, str] | None] = {}
        self._session_chats: dict[str, tuple[int, int]] = {}
        # The open session of each chat (and user, in a private chat) as a turn last found it: the next
        # turn checks it is still open as it marks it active (open_turn), instead of looking it up.
        self._open: dict[tuple[int, int | None], SessionInfo] = {}
        self._history = HistoryCache()  # the histories read here, with their revision
        self._postgres: bool = self._engine.dialect.name == "postgresql"
        dialect: Any = postgresql if self._postgres else sqlite
        users = dialect.insert(USERS).values(
            id=bindparam("uid"),
            first_name=bindparam("first"),
            username=bindparam("uname"),
            created_at=bindparam("now"),
            last_seen_at=bindparam("now"),
        )
        # One statement whether the user is new or not; an empty name never replaces a known one.
        self._upsert = users.on_conflict_do_update(
            index_elements=["id"],
            set_={
                "first_name": func.coalesce(func.nullif(users.excluded.first_name, ""), USERS.c.first_name),
                "username": func.coalesce(func.nullif(users.excluded.username, ""), USERS.c.username),
                "last_seen_at": users.excluded.last_seen_at,
            },
        ).returning(USERS.c.timezone)
        self._bare_user = (
            dialect.insert(USERS)
            .values(id=bindparam("uid"), created_at=bindparam("now"), last_seen_at=bindparam("now"))
            .on_conflict_do_nothing(index_elements=["id"])
        )

    @property
    def over_network(self) -> bool:
        """Whether a call waits on a database server (PostgreSQL), not on a local file (SQLite)."""
        return self._postgres

    def ensure_user(self, user_id: int, first_name: str | None = None, username: str | None = None) -> None:
        """Create the user on first contact; later refresh the name and (once a minute) the last-seen time."""
        now = utcnow()
        if not self._user_due(user_id, first_name, username, now):
            return
        with self._engine.begin() as conn:
            self._upsert_user(conn, user_id, first_name, username, now)
        self._seen[user_id] = ((first_name, username), now)

    def _user_due(self, user_id: int, first_name: str | None, username: str | None, now: datetime) -> bool:
        """Whether the user's row needs a write: new here, renamed, or last seen over a minute ago."""
        seen = self._seen.get(user_id)
        # Hot path: the same user a moment ago with the same names needs no database round trip.
        return not (
            seen is not None and seen[0] == (first_name, username) and now - seen[1] < LAST_SEEN_RESOLUTION
        )

    def _upsert_user(
        self, conn: Connection, user_id: int, first_name: str | None, username: str | None, now: datetime
    ) -> None:
        params = {"uid": user_id, "first": first_name, "uname": username, "now": now}
        self._timezones[user_id] = conn.execute(self._upsert, params).scalar()

    def user_timezone(self, user_id: int) -> str | None:
        """The user's IANA time zone, if they set one (cached; refreshed when the user is next seen, at most a
        minute later, when another process changed it)."""
        if user_id in self._timezones:
            return self._timezones[user_id]
        with self._engine.connect() as conn:
            tz = conn.execute(TIMEZONE, {"uid": user_id}).scalar()
        self._timezones[user_id] = tz
        return tz

    def set_user_timezone(self, user_id: int, tz: str) -> None:
        """Remember the user's IANA time zone."""
        with self._sm.begin() as s:
            user = s.get(User, user_id)
            if user is None:
                s.add(User(id=user_id, timezone=tz))
            else:
                user.timezone = tz
        self._timezones[user_id] = tz

    def current_session(
        self, user_id: int, chat_id: int, now: datetime | None = None, chat_type: str | None = None
    ) -> SessionInfo:
        """The user's open session in this chat, opening one (of `chat_type`) if there is none.

        In a group or supergroup the session is the chat's, shared by everyone who speaks there."""
        with self._engine.connect() as conn:
            found = self._open_session(conn, user_id, chat_id, chat_type)
        if found is not None:
            return found
        return self.start_session(user_id, chat_id, now=now, chat_type=chat_type)

    @staticmethod
    def _open_session(
        conn: Connection, user_id: int, chat_id: int, chat_type: str | None
    ) -> SessionInfo | None:
        if chat_type_of(user_id, chat_id, chat_type) != "private":
            row = OPEN_CHAT_SESSION_RUN.first(conn, {"cid": chat_id})
        else:
            row = OPEN_SESSION_RUN.first(conn, {"uid": user_id, "cid": chat_id})
        return None if row is None else SessionInfo(*row)

    def _start_session(
        self,
        conn: Connection,
        user_id: int,
        chat_id: int,
        name: str | None,
        started: datetime,
        chat_type: str | None,
    ) -> SessionInfo:
        """Open a session in the caller's transaction (the user's row must exist)."""
        info = SessionInfo(
            new_id(),
            user_id,
            chat_id,
            name or f"Session {started:%Y-%m-%d %H:%M}",
            started,
            started,
            None,
            chat_type_of(user_id, chat_id, chat_type),
        )
        conn.execute(
            INSERT_SESSION,
            {
                "id": info.id,
                "user_id": user_id,
                "chat_id": chat_id,
                "chat_type": info.chat_type,
                "name": info.name,
                "started_at": started,
                "last_activity_at": started,
            },
        )
        return info

    def _remember_session(self, session: SessionInfo) -> None:
        if session.id not in self._session_chats:
            if len(self._session_chats) > 10_000:  # a bound, not an eviction policy: refilled on demand
                self._session_chats.clear()
            self._session_chats[session.id] = (session.user_id, session.chat_id)

    def session_chat(self, session_id: str) -> tuple[int, int] | None:
        """(user id, chat id) of a session (cached: they never change)."""
        found = self._session_chats.get(session_id)
        if found is None:
            with self._engine.connect() as conn:
                row = conn.execute(
                    select(SESSIONS.c.user_id, SESSIONS.c.chat_id).where(SESSIONS.c.id == session_id)
                ).first()
            if row is None:
                return None
            if len(self._session_chats) > 10_000:  # a bound, not an eviction policy: refilled on demand
                self._session_chats.clear()
            found = self._session_chats[session_id] = (int(row.user_id), int(row.chat_id))
        return found

    def get_session(self, session_id: str) -> SessionInfo | None:
        """A session by id."""
        with self._sm() as s:
            row = s.get(ChatSession, session_id)
            return None if row is None else session_info(row)

    def end_session(self, session_id: str, summary: str | None = None, now: datetime | None = None) -> None:
        """Close a session, keeping its summary."""
        with self._sm.begin() as s:
            row = s.get(ChatSession, session_id)
            if row is not None and row.ended_at is None:
                row.ended_at = now or utcnow()
                row.summary = summary
        self._summaries.clear()
        self._open.clear()  # (rare: each chat's next turn looks its session up)

    def start_session(
        self,
        user_id: int,
        chat_id: int,
        name: str | None = None,
        now: datetime | None = None,
        chat_type: str | None = None,
    ) -> SessionInfo:
        """Open a new session of the user in this chat (the caller ends the old one first)."""
        started = now or utcnow()
        with self._engine.begin() as conn:
            # Sessions reference users: a bare user row when a session comes first (e.g. /newsession).
            conn.execute(self._bare_user, {"uid": user_id, "now": started})
            return self._start_session(conn, user_id, chat_id, name, started, chat_type)

    # ------------------------------------------------------------------ a turn's two transactions

    def open_turn(self, o: TurnOpening) -> OpenedTurn:
        """Store what a turn begins with, in one transaction: the user (first contact, a new name, or a
        minute since last seen), the session (opened when there is none), the turn's user messages moved
        from the inbox into the history as pending (or, for a re-run, the old answer superseded), and the
        turn published on its chat's lease."""
        now = utcnow()
        who = o.speaker
        user_id, chat_id, chat_type = who.user_id, who.chat_id, who.chat_type
        due = self._user_due(user_id, who.first_name, who.username, now)
        key = _open_key(user_id, chat_id, chat_type)
        known = self._open.get(key) if o.rerun_of is None else None
        with connections.begin(self._engine) as conn:
            if due:
                self._upsert_user(conn, user_id, who.first_name, who.username, now)
            session, before = None, None
            if known is not None:  # still the chat's open session (in any process): marked active now
                touch = TOUCH_OPEN_SESSION_RUN if key[1] is not None else TOUCH_OPEN_CHAT_SESSION_RUN
                row = touch.first(conn, {"sid": known.id, "at": now})
                if row is not None:
                    session, before = SessionInfo(*row[:-1]), int(row[-1])
            if session is None:
                session = self._open_session(conn, user_id, chat_id, chat_type)
            if session is None:
                if not due:  # the user's row, surely there (seen a moment ago), before its session
                    conn.execute(self._bare_user, {"uid": user_id, "now": now})
                session = self._start_session(conn, user_id, chat_id, None, now, chat_type)
            if o.rerun_of is not None:
                conn.execute(SUPERSEDE, {"sid": session.id, "after": o.rerun_of})
                SET_STATUS_RUN.run(conn, {"mid": o.rerun_of, "new_status": "pending"})
                discard_in(conn, o.inbox_ids)  # a re-run waited in the inbox as a request only
                ids = [o.rerun_of]
                revision = None  # (the history is read again)
            else:
                # After the previous turn's rows, out of the inbox.
                ids, revision = move_into_history(
                    conn, session.id, user_id, chat_id, o.texts, o.inbox_ids, "pending", before
                )
            if o.mark is not None:
                publish_turn(conn, o.mark)
        if revision is None:
            self._history.drop(session.id)
        else:
            added = [
                StoredMessage(i, "user", text, None, None, None, "pending")
                for i, (text, _tg) in zip(ids, o.texts, strict=True)
            ]
            self._history.wrote(session.id, len(ids), revision, added=added)
        if due:
            self._seen[user_id] = ((who.first_name, who.username), now)
        self._remember_session(session)
        if len(self._open) > 10_000 and key not in self._open:  # a bound, refilled on demand
            self._open.clear()
        self._open[key] = session
        return OpenedTurn(session, ids)

    def close_turn(self, c: TurnClosing) -> int | None:
        """Store how a turn ended, in one transaction: its last assistant message (if any) with the usage
        of the request that wrote it and the turn's record (db/turn_info.py), its user messages' status, and
        its mark cleared from the chat's lease; returns the assistant message's id."""
        now = utcnow()
        msg_id = None
        changed = 0  # message rows: the history kept here is current if the revision moved by this much
        with connections.begin(self._engine) as conn:
            # The statuses first: a message's row, then its session's (its revision), the order in which an
            # edit of the message takes them (on PostgreSQL neither can hold one while waiting for the other).
            for i in c.message_ids:
                changed += SET_STATUS_RUN.run(conn, {"mid": i, "new_status": c.status})
            if c.answer is not None:
                content = c.answer.content
                row = self._message_row(c.session_id, c.user_id, c.chat_id, "assistant", content, now)
                row["status"] = c.answer.status
                # The session was marked active when the turn opened (the user's message): its idle
                # clock runs from what the user last said, and a turn saves a statement.
                msg_id = self._insert_message(conn, row, now, touch=False)
                changed += 1
                if c.info is not None:
                    insert_turn_info(conn, msg_id, c.info)
            if c.llm_call is not None:
                insert_llm_call(conn, c.llm_call)
            if c.mark is not None:  # last: on PostgreSQL the lease's row is locked the shortest
                clear_turn(conn, c.mark)
        answer = c.answer
        added = (
            [StoredMessage(msg_id, "assistant", answer.content, None, None, None, answer.status)]
            if answer is not None and msg_id is not None
            else []
        )
        # Applied without reading the revision: the next read of it checks that it moved by these alone.
        statuses = dict.fromkeys(c.message_ids, c.status)
        self._history.wrote(c.session_id, changed, None, added=added, statuses=statuses)
        return msg_id

    def last_summary(self, user_id: int, chat_id: int | None = None) -> tuple[str, str] | None:
        """(name, summary) of the user's most recently ended session with a summary in this chat (cached);
        the private chat (chat id = user id) when no chat is given."""
        key = (user_id, user_id if chat_id is None else chat_id)
        if key in self._summaries:
            return self._summaries[key]
        # A group's sessions are the chat's: its summary is found by the chat, whoever started the session.
        owner = ChatSession.user_id == key[0] if key[0] == key[1] else ChatSession.chat_type != "private"
        with self._engine.connect() as conn:
            row = conn.execute(
                select(ChatSession.name, ChatSession.summary)
                .where(
                    owner,
                    ChatSession.chat_id == key[1],
                    ChatSession.summary.is_not(None),
                )
                .order_by(ChatSession.ended_at.desc())
                .limit(1)
            ).first()
        found = None if row is None or row.summary is None else (row.name, row.summary)
        self._summaries[key] = found
        return found

    def open_sessions(self) -> list[SessionInfo]:
        """Every session that has not ended."""
        with self._sm() as s:
            rows = s.scalars(select(ChatSession).where(ChatSession.ended_at.is_(None))).all()
            return [session_info(r) for r in rows]

    def chat_model(self, chat_id: int) -> str | None:
        """The model this chat chose, or None for the default."""
        with self._engine.connect() as conn:
            model: str | None = conn.execute(CHAT_MODEL, {"cid": chat_id}).scalar()
        return model

    def set_chat_model(self, chat_id: int, model: str | None, by_user: int) -> None:
        """Choose the chat's model (None: back to the default)."""
        with self._sm.begin() as s:
            row = s.get(ChatSettings, chat_id)
            if row is None:
                s.add(ChatSettings(chat_id=chat_id, model=model, updated_by=by_user, updated_at=utcnow()))
            else:
                row.model, row.updated_by, row.updated_at = model, by_user, utcnow()
