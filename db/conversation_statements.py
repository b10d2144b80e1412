"""The conversation tables and their hot-path statements, built once with bind parameters (for
db/conversations.py)."""

from __future__ import annotations

from sqlalchemy import Table, and_, bindparam, exists, insert, not_, or_, select, update

from db.models import ChatSession, ChatSettings, Message, User
from db.prepared import Prepared

MESSAGES: Table = Message.__table__  # type: ignore[assignment]
SESSIONS: Table = ChatSession.__table__  # type: ignore[assignment]
USERS: Table = User.__table__  # type: ignore[assignment]
CHAT_SETTINGS: Table = ChatSettings.__table__  # type: ignore[assignment]

# The hot-path statements are built once with bind parameters: building a statement object per call was a
# visible share of a turn's CPU (bench/bench_chat.py); SQLAlchemy caches their compiled form.
TOUCH_SESSION = (
    update(SESSIONS).where(SESSIONS.c.id == bindparam("sid")).values(last_activity_at=bindparam("at"))
)
SUPERSEDE = (
    update(MESSAGES)
    .where(
        MESSAGES.c.session_id == bindparam("sid"),
        MESSAGES.c.id > bindparam("after"),
        MESSAGES.c.role != "user",
        MESSAGES.c.status != "superseded",
    )
    .values(status="superseded")
)
INSERT_SESSION = insert(SESSIONS)
CHAT_MODEL = select(CHAT_SETTINGS.c.model).where(CHAT_SETTINGS.c.chat_id == bindparam("cid"))
TIMEZONE = select(USERS.c.timezone).where(USERS.c.id == bindparam("uid"))
OPEN_SESSION = (
    select(
        SESSIONS.c.id,
        SESSIONS.c.user_id,
        SESSIONS.c.chat_id,
        SESSIONS.c.name,
        SESSIONS.c.started_at,
        SESSIONS.c.last_activity_at,
        SESSIONS.c.ended_at,
        SESSIONS.c.chat_type,
    )
    .where(
        SESSIONS.c.user_id == bindparam("uid"),
        SESSIONS.c.chat_id == bindparam("cid"),
        SESSIONS.c.ended_at.is_(None),
    )
    .order_by(SESSIONS.c.started_at.desc(), SESSIONS.c.id.desc())
    .limit(1)
)
# A group's session belongs to the chat, whoever speaks (issue 14): found by the chat alone.
OPEN_CHAT_SESSION = (
    select(*OPEN_SESSION.selected_columns)
    .where(
        SESSIONS.c.chat_id == bindparam("cid"),
        SESSIONS.c.chat_type != "private",
        SESSIONS.c.ended_at.is_(None),
    )
    .order_by(SESSIONS.c.started_at.desc(), SESSIONS.c.id.desc())
    .limit(1)
)
HISTORY_COLUMNS = (
    MESSAGES.c.id,
    MESSAGES.c.role,
    MESSAGES.c.content,
    MESSAGES.c.tool_calls,
    MESSAGES.c.tool_call_id,
    MESSAGES.c.tool_name,
    MESSAGES.c.status,
)
HISTORY = (
    select(*HISTORY_COLUMNS)
    .where(MESSAGES.c.session_id == bindparam("sid"))
    .order_by(MESSAGES.c.id.desc())
    .limit(bindparam("lim"))
)
HISTORY_BETWEEN = (
    select(*HISTORY_COLUMNS)
    .where(
        MESSAGES.c.session_id == bindparam("sid"),
        MESSAGES.c.id >= bindparam("first"),
        MESSAGES.c.id < bindparam("before"),
    )
    .order_by(MESSAGES.c.id)
)

# The statements every plain turn runs, run on the driver's cursor (db/prepared.py). Each is defined once:
# a caller off the turn path runs the same `Prepared` (docs/database.md).
MESSAGE_KEYS = (
    "session_id",
    "user_id",
    "chat_id",
    "role",
    "content",
    "tool_calls",
    "tool_call_id",
    "tool_name",
    "status",
    "created_at",
    "tg_message_id",
)
INSERT_MESSAGE_RUN = Prepared(insert(MESSAGES).returning(MESSAGES.c.id), keys=MESSAGE_KEYS)
TOUCH_SESSION_RUN = Prepared(TOUCH_SESSION)
SET_STATUS_RUN = Prepared(
    update(MESSAGES).where(MESSAGES.c.id == bindparam("mid")).values(status=bindparam("new_status"))
)
OPEN_SESSION_RUN = Prepared(OPEN_SESSION)
OPEN_CHAT_SESSION_RUN = Prepared(OPEN_CHAT_SESSION)
HISTORY_RUN = Prepared(HISTORY)
# The session's revision of its messages (migration 0023): db/history_cache.py.
HISTORY_REVISION_RUN = Prepared(select(SESSIONS.c.history_rev).where(SESSIONS.c.id == bindparam("sid")))
TOUCH_SESSION_REVISION_RUN = Prepared(TOUCH_SESSION.returning(SESSIONS.c.history_rev))
# A session this process saw open, marked active if it is still the one a lookup would find (not ended, and
# no newer open session of its chat: two first contacts racing can open two, and every process must write
# to the same one): its row as OPEN_SESSION reads it, and its revision before the turn's messages
# (db/conversations.py, open_turn). One statement each for a private chat's key and a group's.
_NEWER = SESSIONS.alias("newer")
_NEWER_OPEN = and_(
    _NEWER.c.chat_id == SESSIONS.c.chat_id,
    _NEWER.c.ended_at.is_(None),
    or_(
        _NEWER.c.started_at > SESSIONS.c.started_at,
        and_(_NEWER.c.started_at == SESSIONS.c.started_at, _NEWER.c.id > SESSIONS.c.id),
    ),
)
TOUCH_OPEN_SESSION_RUN = Prepared(
    TOUCH_SESSION.where(
        SESSIONS.c.ended_at.is_(None),
        not_(exists().where(_NEWER_OPEN, _NEWER.c.user_id == SESSIONS.c.user_id)),
    ).returning(*OPEN_SESSION.selected_columns, SESSIONS.c.history_rev)
)
TOUCH_OPEN_CHAT_SESSION_RUN = Prepared(
    TOUCH_SESSION.where(
        SESSIONS.c.ended_at.is_(None),
        not_(exists().where(_NEWER_OPEN, _NEWER.c.chat_type != "private")),
    ).returning(*OPEN_SESSION.selected_columns, SESSIONS.c.history_rev)
)
