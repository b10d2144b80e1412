"""One row per answered turn: what its "why this answer" view shows (migration 0021).

The row is written in the transaction that stores the turn's answer with its usage (db/conversations.py
`close_turn`): a plain turn gains a statement, not a transaction. It is deleted with the answer or the
turn's user message (ON DELETE CASCADE), so it is kept exactly as long as the turn's messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, Engine, Table, bindparam, insert, select

from db.models import TurnInfo, User, utcnow
from db.prepared import Prepared

_TURN_INFO: Table = TurnInfo.__table__  # type: ignore[assignment]
_USERS: Table = User.__table__  # type: ignore[assignment]
_INSERT = insert(_TURN_INFO)  # built once: it runs with every answer
_INSERT_RUN = Prepared(
    _INSERT,
    keys=(
        "answer_id",
        "user_message_id",
        "user_id",
        "chat_id",
        "model",
        "api_calls",
        "tool_calls",
        "duration_ms",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "tokens_estimated",
        "cost_usd",
        "memories",
        "tools",
        "created_at",
    ),
)
_BY_ANSWER = (
    select(_TURN_INFO, _USERS.c.first_name)
    .outerjoin(_USERS, _USERS.c.id == _TURN_INFO.c.user_id)
    .where(_TURN_INFO.c.answer_id == bindparam("aid"))
)


@dataclass(frozen=True)
class RecalledMemory:
    """A memory that went into a turn's prompt: its public id and (the start of) its text."""

    id: str
    content: str


@dataclass(frozen=True)
class ToolUse:
    """A tool call of a turn: the tool, its arguments (as the model wrote them, cut short) and whether it
    succeeded."""

    name: str
    arguments: str
    ok: bool


@dataclass(frozen=True)
class TurnInfoRecord:
    """What a turn used, as stored with its answer."""

    user_id: int
    chat_id: int
    user_message_id: int
    model: str
    api_calls: int
    duration_ms: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0
    tokens_estimated: bool = False
    cost_usd: float | None = None  # None: a model without a price
    memories: tuple[RecalledMemory, ...] = ()
    tools: tuple[ToolUse, ...] = ()


@dataclass(frozen=True)
class StoredTurnInfo:
    """A turn's stored record, with the answer it describes and the asker's first name."""

    answer_id: int
    record: TurnInfoRecord
    first_name: str | None


def insert_turn_info(conn: Connection, answer_id: int, r: TurnInfoRecord) -> None:
    """Store a turn's record in the caller's transaction (the one that stores its answer)."""
    _INSERT_RUN.run(
        conn,
        {
            "answer_id": answer_id,
            "user_message_id": r.user_message_id,
            "user_id": r.user_id,
            "chat_id": r.chat_id,
            "model": r.model[:255],
            "api_calls": r.api_calls,
            "tool_calls": len(r.tools),
            "duration_ms": r.duration_ms,
            "prompt_tokens": r.prompt_tokens,
            "completion_tokens": r.completion_tokens,
            "cached_tokens": r.cached_tokens,
            "tokens_estimated": r.tokens_estimated,
            "cost_usd": r.cost_usd,
            "memories": [{"id": m.id, "content": m.content} for m in r.memories],
            "tools": [{"name": t.name, "arguments": t.arguments, "ok": t.ok} for t in r.tools],
            "created_at": utcnow(),
        },
    )


def _record(row: Any) -> TurnInfoRecord:
    memories: list[dict[str, Any]] = row.memories or []
    tools: list[dict[str, Any]] = row.tools or []
    return TurnInfoRecord(
        user_id=int(row.user_id),
        chat_id=int(row.chat_id),
        user_message_id=int(row.user_message_id),
        model=row.model,
        api_calls=int(row.api_calls),
        duration_ms=int(row.duration_ms),
        prompt_tokens=int(row.prompt_tokens),
        completion_tokens=int(row.completion_tokens),
        cached_tokens=int(row.cached_tokens),
        tokens_estimated=bool(row.tokens_estimated),
        cost_usd=None if row.cost_usd is None else float(row.cost_usd),
        memories=tuple(RecalledMemory(str(m["id"]), str(m["content"])) for m in memories),
        tools=tuple(ToolUse(str(t["name"]), str(t["arguments"]), bool(t["ok"])) for t in tools),
    )


class TurnInfos:
    """Reads the per-turn records (they are written with the answer: `insert_turn_info`)."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def for_answer(self, answer_id: int) -> StoredTurnInfo | None:
        """The record of the turn whose answer is message `answer_id`; None when it is gone."""
        with self._engine.connect() as conn:
            row = conn.execute(_BY_ANSWER, {"aid": answer_id}).first()
        return None if row is None else StoredTurnInfo(int(row.answer_id), _record(row), row.first_name)
