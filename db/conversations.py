"""Users, sessions and messages: the conversation history every turn is built from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, Engine, Table, bindparam, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, sessionmaker

from db.models import ChatSession, ChatSettings, Message, User, new_id, utcnow
from db.runtime.inbox import Inbox, discard_in, move_into_history
from db.runtime.store import TurnMark, clear_turn, publish_turn
from db.topics import Topics
from db.turn_info import TurnInfoRecord, insert_turn_info
from db.usage import LLMCallRecord, insert_llm_call

LAST_SEEN_RESOLUTION = timedelta(minutes=1)
_MESSAGES: Table = Message.__table__  # type: ignore[assignment]
_SESSIONS: Table = ChatSession.__table__  # type: ignore[assignment]
_USERS: Table = User.__table__  # type: ignore[assignment]
_CHAT_SETTINGS: Table = ChatSettings.__table__  # type: ignore[assignment]

# The hot-path statements are built once with bind parameters: building a statement object per call was a
# visible share of a turn's CPU (bench/bench_chat.py); SQLAlchemy caches their compiled form.
_INSERT_MESSAGE = insert(_MESSAGES)
_TOUCH_SESSION = (
    update(_SESSIONS).where(_SESSIONS.c.id == bindparam("sid")).values(last_activity_at=bindparam("at"))
)
_SET_STATUS = (
    update(_MESSAGES).where(_MESSAGES.c.id == bindparam("mid")).values(status=bindparam("new_status"))
)
_SUPERSEDE = (
    update(_MESSAGES)
    .where(
        _MESSAGES.c.session_id == bindparam("sid"),
        _MESSAGES.c.id > bindparam("after"),
        _MESSAGES.c.role != "user",
        _MESSAGES.c.status != "superseded",
    )
    .values(status="superseded")
)
_INSERT_SESSION = insert(_SESSIONS)
_CHAT_MODEL = select(_CHAT_SETTINGS.c.model).where(_CHAT_SETTINGS.c.chat_id == bindparam("cid"))
_TIMEZONE = select(_USERS.c.timezone).where(_USERS.c.id == bindparam("uid"))
_OPEN_SESSION = (
    select(
        _SESSIONS.c.id,
        _SESSIONS.c.user_id,
        _SESSIONS.c.chat_id,
        _SESSIONS.c.name,
        _SESSIONS.c.started_at,
        _SESSIONS.c.last_activity_at,
        _SESSIONS.c.ended_at,
        _SESSIONS.c.chat_type,
    )
    .where(
        _SESSIONS.c.user_id == bindparam("uid"),
        _SESSIONS.c.chat_id == bindparam("cid"),
        _SESSIONS.c.ended_at.is_(None),
    )
    .order_by(_SESSIONS.c.started_at.desc())
    .limit(1)
)
# A group's session belongs to the chat, whoever speaks (issue 14): found by the chat alone.
_OPEN_CHAT_SESSION = (
    select(*_OPEN_SESSION.selected_columns)
    .where(
        _SESSIONS.c.chat_id == bindparam("cid"),
        _SESSIONS.c.chat_type != "private",
        _SESSIONS.c.ended_at.is_(None),
    )
    .order_by(_SESSIONS.c.started_at.desc())
    .limit(1)
)
_HISTORY_COLUMNS = (
    _MESSAGES.c.id,
    _MESSAGES.c.role,
    _MESSAGES.c.content,
    _MESSAGES.c.tool_calls,
    _MESSAGES.c.tool_call_id,
    _MESSAGES.c.tool_name,
    _MESSAGES.c.status,
)
_HISTORY = (
    select(*_HISTORY_COLUMNS)
    .where(_MESSAGES.c.session_id == bindparam("sid"))
    .order_by(_MESSAGES.c.id.desc())
    .limit(bindparam("lim"))
)
_HISTORY_BETWEEN = (
    select(*_HISTORY_COLUMNS)
    .where(
        _MESSAGES.c.session_id == bindparam("sid"),
        _MESSAGES.c.id >= bindparam("first"),
        _MESSAGES.c.id < bindparam("before"),
    )
    .order_by(_MESSAGES.c.id)
)


@dataclass(frozen=True)
class StoredMessage:
    """A message row as plain data."""

    id: int
    role: str
    content: str | None
    tool_calls: list[dict[str, Any]] | None
    tool_call_id: str | None
    tool_name: str | None
    status: str
    created_at: datetime | None = None


@dataclass(frozen=True)
class SessionInfo:
    """A session row as plain data."""

    id: str
    user_id: int
    chat_id: int
    name: str
    started_at: datetime
    last_activity_at: datetime
    ended_at: datetime | None
    chat_type: str = "private"  # private | group | supergroup | channel


def _info(s: ChatSession) -> SessionInfo:
    return SessionInfo(
        s.id, s.user_id, s.chat_id, s.name, s.started_at, s.last_activity_at, s.ended_at, s.chat_type
    )


def _chat_type(user_id: int, chat_id: int, chat_type: str | None) -> str:
    # Unknown type: only the user's own chat id (a Telegram private chat's id) counts as private.
    return chat_type or ("private" if chat_id == user_id else "group")


@dataclass(frozen=True)
class UserMessage:
    """A stored user message, as /retry and edits see it."""

    id: int
    session_id: str
    user_id: int
    chat_id: int
    content: str
    status: str
    tg_message_id: int | None
    latest: bool  # no later user message in its session


@dataclass(frozen=True)
class TurnOpening:
    """What a turn stores before its first LLM request: its user messages ((text, Telegram id), in order),
    taken out of the inbox; or, for a /retry or an edit, the stored message it answers again."""

    user_id: int
    chat_id: int
    chat_type: str
    texts: tuple[tuple[str, int | None], ...] = ()
    inbox_ids: tuple[int, ...] = ()
    rerun_of: int | None = None
    first_name: str | None = None
    username: str | None = None
    mark: TurnMark | None = None  # the turn, published on its chat's lease


@dataclass(frozen=True)
class OpenedTurn:
    """The session a turn runs in and its user messages' ids."""

    session: SessionInfo
    message_ids: list[int]


@dataclass(frozen=True)
class Answer:
    """The assistant message that ends a turn (its content may be empty)."""

    content: str | None
    status: str = "done"  # "stopped": the partial answer of a turn the user stopped


@dataclass(frozen=True)
class TurnClosing:
    """How a turn ended: its user messages' status, the assistant message that ends it (if any), the usage
    of the LLM request that wrote it, the turn's mark to clear from its chat's lease, and what the turn
    used (`info`: stored keyed by the answer, for its "why this answer" view)."""

    session_id: str
    user_id: int
    chat_id: int
    message_ids: tuple[int, ...]
    status: str  # answered | failed | interrupted | refused | stopped
    answer: Answer | None = None
    llm_call: LLMCallRecord | None = None
    mark: TurnMark | None = None
    info: TurnInfoRecord | None = None


class Conversations:
    """Queries over users, sessions and messages."""

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sm = sessions
        self._engine: Engine = sessions.kw["bind"]
        self.inbox = Inbox(self._engine)  # messages waiting for their turn; a turn stores them from there
        # Forum topics are conversations of their own: their keys stand in for chat ids (db/topics.py).
        self.topics = Topics(self._engine)
        # Small per-process caches of the hot path; the bot is the only writer of these columns.
        self._seen: dict[int, tuple[tuple[str | None, str | None], datetime]] = {}
        self._timezones: dict[int, str | None] = {}
        # last_summary() per (user, chat); reset by end_session
        self._summaries: dict[tuple[int, int], tuple[str, str] | None] = {}
        self._session_chats: dict[str, tuple[int, int]] = {}
        self._postgres: bool = self._engine.dialect.name == "postgresql"
        dialect: Any = postgresql if self._postgres else sqlite
        users = dialect.insert(_USERS).values(
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
                "first_name": func.coalesce(func.nullif(users.excluded.first_name, ""), _USERS.c.first_name),
                "username": func.coalesce(func.nullif(users.excluded.username, ""), _USERS.c.username),
                "last_seen_at": users.excluded.last_seen_at,
            },
        ).returning(_USERS.c.timezone)
        self._bare_user = (
            dialect.insert(_USERS)
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
            tz = conn.execute(_TIMEZONE, {"uid": user_id}).scalar()
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
        if _chat_type(user_id, chat_id, chat_type) != "private":
            row = conn.execute(_OPEN_CHAT_SESSION, {"cid": chat_id}).first()
        else:
            row = conn.execute(_OPEN_SESSION, {"uid": user_id, "cid": chat_id}).first()
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
            _chat_type(user_id, chat_id, chat_type),
        )
        conn.execute(
            _INSERT_SESSION,
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
                    select(_SESSIONS.c.user_id, _SESSIONS.c.chat_id).where(_SESSIONS.c.id == session_id)
                ).first()
            if row is None:
                return None
            if len(self._session_chats) > 10_000:  # a bound, not an eviction policy: refilled on demand
                self._session_chats.clear()
            found = self._session_chats[session_id] = (int(row[0]), int(row[1]))
        return found

    def get_session(self, session_id: str) -> SessionInfo | None:
        """A session by id."""
        with self._sm() as s:
            row = s.get(ChatSession, session_id)
            return None if row is None else _info(row)

    def end_session(self, session_id: str, summary: str | None = None, now: datetime | None = None) -> None:
        """Close a session, keeping its summary."""
        with self._sm.begin() as s:
            row = s.get(ChatSession, session_id)
            if row is not None and row.ended_at is None:
                row.ended_at = now or utcnow()
                row.summary = summary
        self._summaries.clear()

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
        due = self._user_due(o.user_id, o.first_name, o.username, now)
        with self._engine.begin() as conn:
            if due:
                self._upsert_user(conn, o.user_id, o.first_name, o.username, now)
            session = self._open_session(conn, o.user_id, o.chat_id, o.chat_type)
            if session is None:
                if not due:  # the user's row, surely there (seen a moment ago), before its session
                    conn.execute(self._bare_user, {"uid": o.user_id, "now": now})
                session = self._start_session(conn, o.user_id, o.chat_id, None, now, o.chat_type)
            if o.rerun_of is not None:
                conn.execute(_SUPERSEDE, {"sid": session.id, "after": o.rerun_of})
                conn.execute(_SET_STATUS, {"mid": o.rerun_of, "new_status": "pending"})
                discard_in(conn, o.inbox_ids)  # a re-run waited in the inbox as a request only
                ids = [o.rerun_of]
            else:
                # After the previous turn's rows, out of the inbox.
                ids = move_into_history(
                    conn, session.id, o.user_id, o.chat_id, o.texts, o.inbox_ids, "pending"
                )
            if o.mark is not None:
                publish_turn(conn, o.mark)
        if due:
            self._seen[o.user_id] = ((o.first_name, o.username), now)
        self._remember_session(session)
        return OpenedTurn(session, ids)

    def close_turn(self, c: TurnClosing) -> int | None:
        """Store how a turn ended, in one transaction: its last assistant message (if any) with the usage
        of the request that wrote it and the turn's record (db/turn_info.py), its user messages' status, and
        its mark cleared from the chat's lease; returns the assistant message's id."""
        now = utcnow()
        msg_id = None
        with self._engine.begin() as conn:
            if c.answer is not None:
                content = c.answer.content
                row = self._message_row(c.session_id, c.user_id, c.chat_id, "assistant", content, now)
                row["status"] = c.answer.status
                msg_id = self._insert_message(conn, row, now)
                if c.info is not None:
                    insert_turn_info(conn, msg_id, c.info)
            if c.llm_call is not None:
                insert_llm_call(conn, c.llm_call)
            if c.message_ids:
                conn.execute(_SET_STATUS, [{"mid": i, "new_status": c.status} for i in c.message_ids])
            if c.mark is not None:  # last: on PostgreSQL the lease's row is locked the shortest
                clear_turn(conn, c.mark)
        return msg_id

    def last_summary(self, user_id: int, chat_id: int | None = None) -> tuple[str, str] | None:
        """(name, summary) of the user's most recently ended session with a summary in this chat (cached);
        the private chat (chat id = user id) when no chat is given."""
        key = (user_id, user_id if chat_id is None else chat_id)
        if key in self._summaries:
            return self._summaries[key]
        # A group's sessions are the chat's: its summary is found by the chat, whoever started the session.
        owner = ChatSession.user_id == key[0] if key[0] == key[1] else ChatSession.chat_type != "private"
        with self._sm() as s:
            row = s.execute(
                select(ChatSession.name, ChatSession.summary)
                .where(
                    owner,
                    ChatSession.chat_id == key[1],
                    ChatSession.summary.is_not(None),
                )
                .order_by(ChatSession.ended_at.desc())
                .limit(1)
            ).first()
        found = None if row is None or row[1] is None else (row[0], row[1])
        self._summaries[key] = found
        return found

    def open_sessions(self) -> list[SessionInfo]:
        """Every session that has not ended."""
        with self._sm() as s:
            rows = s.scalars(select(ChatSession).where(ChatSession.ended_at.is_(None))).all()
            return [_info(r) for r in rows]

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
    def _insert_message(conn: Connection, row: dict[str, Any], now: datetime) -> int:
        key = conn.execute(_INSERT_MESSAGE, row).inserted_primary_key
        conn.execute(_TOUCH_SESSION, {"sid": row["session_id"], "at": now})
        assert key is not None
        return int(key[0])

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
                    conn.execute(_INSERT_MESSAGE, row)
                conn.execute(_TOUCH_SESSION, {"sid": session_id, "at": now})

    def set_status(self, message_id: int, status: str) -> None:
        """Change a user message's status (pending -> answered | failed | interrupted | refused)."""
        with self._engine.begin() as conn:
            conn.execute(_SET_STATUS, {"mid": message_id, "new_status": status})

    def set_statuses(self, message_ids: list[int], status: str) -> None:
        """Change the status of several messages at once (the user messages of one turn)."""
        if message_ids:
            with self._engine.begin() as conn:
                conn.execute(_SET_STATUS, [{"mid": i, "new_status": status} for i in message_ids])

    def supersede_answer(self, session_id: str, user_message_id: int) -> int:
        """Mark the answer to a user message (every later non-user message of the session) superseded:
        kept in the database, left out of the history the model sees. Returns how many rows changed."""
        with self._engine.begin() as conn:
            result = conn.execute(_SUPERSEDE, {"sid": session_id, "after": user_message_id})
            return int(result.rowcount or 0)

    def _user_message(self, conn: Any, row: Any) -> UserMessage:
        later = conn.execute(
            select(_MESSAGES.c.id)
            .where(
                _MESSAGES.c.session_id == row.session_id, _MESSAGES.c.id > row.id, _MESSAGES.c.role == "user"
            )
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
        _MESSAGES.c.id,
        _MESSAGES.c.session_id,
        _MESSAGES.c.user_id,
        _MESSAGES.c.chat_id,
        _MESSAGES.c.content,
        _MESSAGES.c.status,
        _MESSAGES.c.tg_message_id,
    )

    def last_user_message(self, session_id: str) -> UserMessage | None:
        """The newest user message of a session (what /retry answers again)."""
        with self._engine.connect() as conn:
            row = conn.execute(
                select(*self._USER_COLUMNS)
                .where(_MESSAGES.c.session_id == session_id, _MESSAGES.c.role == "user")
                .order_by(_MESSAGES.c.id.desc())
                .limit(1)
            ).first()
            return None if row is None else self._user_message(conn, row)

    def find_by_telegram_id(self, chat_id: int, tg_message_id: int) -> UserMessage | None:
        """The stored user message that Telegram knows as `tg_message_id` in this chat, if any."""
        with self._engine.connect() as conn:
            row = conn.execute(
                select(*self._USER_COLUMNS)
                .where(
                    _MESSAGES.c.chat_id == chat_id,
                    _MESSAGES.c.tg_message_id == tg_message_id,
                    _MESSAGES.c.role == "user",
                )
                .order_by(_MESSAGES.c.id.desc())
                .limit(1)
            ).first()
            return None if row is None else self._user_message(conn, row)

    def edit_message(self, message_id: int, content: str) -> None:
        """Replace a user message's text with the user's edit (the edit time is kept)."""
        with self._engine.begin() as conn:
            conn.execute(
                update(_MESSAGES)
                .where(_MESSAGES.c.id == message_id)
                .values(content=content, edited_at=utcnow())
            )

    def chat_model(self, chat_id: int) -> str | None:
        """The model this chat chose, or None for the default."""
        with self._engine.connect() as conn:
            model: str | None = conn.execute(_CHAT_MODEL, {"cid": chat_id}).scalar()
        return model

    def set_chat_model(self, chat_id: int, model: str | None, by_user: int) -> None:
        """Choose the chat's model (None: back to the default)."""
        with self._sm.begin() as s:
            row = s.get(ChatSettings, chat_id)
            if row is None:
                s.add(ChatSettings(chat_id=chat_id, model=model, updated_by=by_user, updated_at=utcnow()))
            else:
                row.model, row.updated_by, row.updated_at = model, by_user, utcnow()

    def messages(self, session_id: str, limit: int = 500, since_id: int | None = None) -> list[StoredMessage]:
        """The newest `limit` messages of a session, oldest first (without `created_at`, to stay cheap),
        and every message from `since_id` on even past the limit (the current turn is always whole)."""
        with self._engine.connect() as conn:
            rows = list(reversed(conn.execute(_HISTORY, {"sid": session_id, "lim": limit}).all()))
            if since_id is not None and rows and rows[0][0] > since_id:
                params = {"sid": session_id, "first": since_id, "before": rows[0][0]}
                rows = [*conn.execute(_HISTORY_BETWEEN, params).all(), *rows]
        return [StoredMessage(*row) for row in rows]
