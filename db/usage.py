"""LLM-call and tool-call records: what every run leaves behind; usage sums, budgets and turn events."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, Row, Table, case, delete, func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from db import connections
from db.attribution import task_run_columns
from db.engine import engine_for
from db.models import (
    Budget,
    BudgetNotice,
    CodeExecution,
    LLMCall,
    Message,
    ToolCallLog,
    TurnEvent,
    User,
    utcnow,
)
from db.prepared import Prepared

_LLM_CALLS: Table = LLMCall.__table__  # type: ignore[assignment]
_INSERT_LLM_CALL = insert(_LLM_CALLS)  # built once: it runs on every LLM call
_TOOL_CALLS: Table = ToolCallLog.__table__  # type: ignore[assignment]
_INSERT_TOOL_CALL = insert(_TOOL_CALLS)  # and this on every tool call (an MCP call's overhead is mostly this)


@dataclass(frozen=True)
class LLMCallRecord:
    """One LLM request as the usage log keeps it: chat, background, embedding, transcription or speech,
    successful or not (`audio_seconds` for a transcription)."""

    user_id: int | None
    session_id: str | None
    purpose: str
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    tokens_estimated: bool = False  # the server reported no usage: the tokens are estimated
    duration_ms: int = 0
    error: str | None = None
    audio_seconds: int = 0
    # The scheduled task run the call was made for (db/attribution.py), taken where the call was made: a
    # record stored later (with a turn's answer) or from another thread keeps it. None: the context's.
    schedule_id: int | None = None
    firing_id: int | None = None


_INSERT_LLM_CALL_RUN = Prepared(
    _INSERT_LLM_CALL, keys=(*(f.name for f in fields(LLMCallRecord)), "created_at")
)


@dataclass(frozen=True)
class ToolCallRecord:
    """One tool call as the usage log keeps it, with its full result."""

    user_id: int | None
    session_id: str | None
    call_id: str
    tool: str
    arguments: str
    ok: bool
    result: str
    error: str | None
    duration_ms: int


_INSERT_TOOL_CALL_RUN = Prepared(
    _INSERT_TOOL_CALL, keys=(*(f.name for f in fields(ToolCallRecord)), "created_at")
)


def insert_llm_call(conn: Connection, record: LLMCallRecord) -> None:
    """Store an LLM call record in the caller's transaction (a turn's answer and its usage go together)."""
    row = {**vars(record), "created_at": utcnow()}
    if record.schedule_id is None and record.firing_id is None:
        row.update(task_run_columns())  # the scheduled task run it was made for, if any
    _INSERT_LLM_CALL_RUN.run(conn, row)


class UsageLog:
    """Writes one row per LLM call and per tool call."""

    def __init__(self, sessions: sessionmaker[Session], engine: Engine) -> None:
        self._sm = sessions
        self._engine = engine_for(sessions, engine)

    def record_llm_call(self, record: LLMCallRecord) -> None:
        """Store one LLM request, successful or not."""
        # A Core insert: this runs on every LLM call, on the event loop.
        with self._engine.begin() as conn:
            insert_llm_call(conn, record)

    def record_tool_call(self, record: ToolCallRecord) -> None:
        """Store one tool call with its full result."""
        with connections.begin(self._engine) as conn:
            _INSERT_TOOL_CALL_RUN.run(conn, {**vars(record), "created_at": utcnow()})


@dataclass(frozen=True)
class ModelUsage:
    """Token sums of one user's LLM calls in a window, for one purpose and model."""

    purpose: str
    model: str
    calls: int
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    estimated_calls: int  # calls whose tokens were estimated (the server reported no usage)
    errors: int
    duration_ms: int
    audio_seconds: int = 0  # transcription calls: priced per minute


@dataclass(frozen=True)
class ActivityCounts:
    """What a user did in a window besides LLM calls."""

    turns: int
    failed_turns: int
    tools: dict[str, int]  # tool name -> calls
    tool_errors: int
    code_runs: int
    code_failures: int
    events: dict[str, int]  # turn event kind -> count


@dataclass(frozen=True)
class BudgetRow:
    """An owner-set cap of one user: `limit` None means explicitly no cap."""

    user_id: int
    period: str
    kind: str
    limit: float | None


@dataclass(frozen=True)
class UserInfo:
    """Who a user id is, as far as the bot knows."""

    user_id: int
    first_name: str | None
    username: str | None
    timezone: str | None


# ModelUsage's sums, after purpose and model: each query labels its sum columns with these names.
USAGE_SUMS = tuple(f.name for f in fields(ModelUsage))[2:]


def usage_of(row: Row[Any], purpose: str | None = None) -> ModelUsage:
    """A ModelUsage from a row with `model`, the sums labelled as USAGE_SUMS, and `purpose` unless given."""
    m = row._mapping
    return ModelUsage(
        str(m["purpose"]) if purpose is None else purpose,
        str(m["model"]),
        **{k: int(m[k]) for k in USAGE_SUMS},
    )


def usage_sums() -> tuple[Any, ...]:
    """ModelUsage's sums of LLM calls: requests, tokens, estimated, failed, time, audio (labelled as
    USAGE_SUMS); the usage report's and a task run's (db/task_costs.py)."""
    columns = (
        func.count(),
        func.coalesce(func.sum(LLMCall.prompt_tokens), 0),
        func.coalesce(func.sum(LLMCall.completion_tokens), 0),
        func.coalesce(func.sum(LLMCall.cached_tokens), 0),
        func.coalesce(func.sum(case((LLMCall.tokens_estimated, 1), else_=0)), 0),
        # A request the user stopped (/stop) is not a failure.
        func.coalesce(
            func.sum(case((LLMCall.error.is_not(None) & (LLMCall.error != "stopped"), 1), else_=0)), 0
        ),
        func.coalesce(func.sum(LLMCall.duration_ms), 0),
        func.coalesce(func.sum(LLMCall.audio_seconds), 0),
    )
    return tuple(c.label(k) for c, k in zip(columns, USAGE_SUMS, strict=True))


class UsageQueries:
    """Reads usage sums and keeps budgets, owner notices and turn events."""

    def __init__(self, sessions: sessionmaker[Session], engine: Engine) -> None:
        self._sm = sessions
        self._engine = engine_for(sessions, engine)
        # Every LLM request reads the user's caps; the bot process is their only writer (set/clear below).
        self._budgets: dict[int, list[BudgetRow]] = {}

    def model_usage(self, user_id: int | None, since: datetime, until: datetime) -> list[ModelUsage]:
        """LLM-call sums grouped by purpose and model; `user_id` None means every user."""
        q = (
            select(
                LLMCall.purpose,
                LLMCall.model,
                *usage_sums(),
            )
            .where(LLMCall.created_at >= since, LLMCall.created_at < until)
            .group_by(LLMCall.purpose, LLMCall.model)
            .order_by(LLMCall.purpose, LLMCall.model)
        )
        if user_id is not None:
            q = q.where(LLMCall.user_id == user_id)
        with self._sm() as s:
            return [usage_of(r) for r in s.execute(q)]

    def model_usage_by_day(self, user_id: int, bounds: Sequence[datetime]) -> list[tuple[int, ModelUsage]]:
        """LLM-call sums of one user per day, purpose and model: (day index, sums), where day i runs from
        bounds[i] to bounds[i + 1] (local midnights, given in UTC, so a day is the user's day)."""
        if len(bounds) < 2:
            return []
        # One grouped query for every day: the day of a row is the first boundary it is below.
        day = case(
            *((LLMCall.created_at < b, i) for i, b in enumerate(bounds[1:])),
            else_=len(bounds) - 1,
        ).label("day")
        q = (
            select(
                day,
                LLMCall.purpose,
                LLMCall.model,
                *usage_sums(),
            )
            .where(
                LLMCall.user_id == user_id,
                LLMCall.created_at >= bounds[0],
                LLMCall.created_at < bounds[-1],
            )
            .group_by(day, LLMCall.purpose, LLMCall.model)
        )
        with self._sm() as s:
            return [(int(r.day), usage_of(r)) for r in s.execute(q).all()]

    def activity(self, user_id: int, since: datetime, until: datetime) -> ActivityCounts:
        """Turns, tool calls by tool, code runs and turn events of one user in a window."""
        with self._sm() as s:
            turn_rows = s.execute(
                select(Message.status, func.count().label("n"))
                .where(
                    Message.user_id == user_id,
                    Message.role == "user",
                    Message.status.in_(("answered", "failed")),
                    Message.created_at >= since,
                    Message.created_at < until,
                )
                .group_by(Message.status)
            ).all()
            statuses = {str(r.status): int(r.n) for r in turn_rows}
            tool_rows = s.execute(
                select(
                    ToolCallLog.tool,
                    func.count().label("n"),
                    func.sum(case((ToolCallLog.ok, 0), else_=1)).label("errors"),
                )
                .where(
                    ToolCallLog.user_id == user_id,
                    ToolCallLog.created_at >= since,
                    ToolCallLog.created_at < until,
                )
                .group_by(ToolCallLog.tool)
                .order_by(func.count().desc(), ToolCallLog.tool)
            ).all()
            code = s.execute(
                select(
                    func.count().label("n"),
                    func.coalesce(func.sum(case((CodeExecution.success, 0), else_=1)), 0).label("failures"),
                ).where(
                    CodeExecution.user_id == user_id,
                    CodeExecution.created_at >= since,
                    CodeExecution.created_at < until,
                )
            ).one()
            event_rows = s.execute(
                select(TurnEvent.kind, func.count().label("n"))
                .where(
                    TurnEvent.user_id == user_id,
                    TurnEvent.created_at >= since,
                    TurnEvent.created_at < until,
                )
                .group_by(TurnEvent.kind)
            ).all()
        return ActivityCounts(
            turns=statuses.get("answered", 0) + statuses.get("failed", 0),
            failed_turns=statuses.get("failed", 0),
            tools={str(r.tool): int(r.n) for r in tool_rows},
            tool_errors=sum(int(r.errors or 0) for r in tool_rows),
            code_runs=int(code.n),
            code_failures=int(code.failures),
            events={str(r.kind): int(r.n) for r in event_rows},
        )

    def active_users(self, since: datetime, until: datetime) -> list[int]:
        """Ids of users with an LLM call, a turn or a turn event in the window."""
        with self._sm() as s:
            ids: set[int] = set()
            for col, ts in (
                (LLMCall.user_id, LLMCall.created_at),
                (Message.user_id, Message.created_at),
                (TurnEvent.user_id, TurnEvent.created_at),
            ):
                ids.update(
                    int(v)
                    for v in s.scalars(select(col).where(ts >= since, ts < until).distinct())
                    if v is not None
                )
        return sorted(ids)

    def users(self, user_ids: list[int]) -> dict[int, UserInfo]:
        """Known users among `user_ids`."""
        if not user_ids:
            return {}
        with self._sm() as s:
            rows = s.scalars(select(User).where(User.id.in_(user_ids))).all()
            return {u.id: UserInfo(u.id, u.first_name, u.username, u.timezone) for u in rows}

    def user_timezone(self, user_id: int) -> str | None:
        """The user's IANA time zone, if they set one."""
        with self._sm() as s:
            user = s.get(User, user_id)
            return None if user is None else user.timezone

    def record_turn_event(
        self, *, user_id: int | None, session_id: str | None, kind: str, detail: str | None
    ) -> None:
        """Store that a turn or job was cut short, and why."""
        with self._sm.begin() as s:
            s.add(TurnEvent(user_id=user_id, session_id=session_id, kind=kind, detail=detail))

    def budgets(self, user_id: int | None = None) -> list[BudgetRow]:
        """Owner-set caps of one user, or of every user when `user_id` is None."""
        if user_id is not None and user_id in self._budgets:
            return list(self._budgets[user_id])
        # Core, not ORM entities: a first contact's request reads it, and building the ORM's row loader
        # cost more than the read (bench/bench_chat.py, 50 chats at once).
        q = select(Budget.user_id, Budget.period, Budget.kind, Budget.limit_value).order_by(
            Budget.user_id, Budget.period, Budget.kind
        )
        if user_id is not None:
            q = q.where(Budget.user_id == user_id)
        with self._engine.connect() as conn:
            rows = [BudgetRow(r.user_id, r.period, r.kind, r.limit_value) for r in conn.execute(q)]
        if user_id is not None:
            self._budgets[user_id] = list(rows)
        return rows

    def set_budget(
        self, *, user_id: int, period: str, kind: str, limit: float | None, set_by: int | None
    ) -> None:
        """Create or replace one cap (`limit` None: explicitly no cap)."""
        with self._sm.begin() as s:
            row = s.scalars(
                select(Budget).where(Budget.user_id == user_id, Budget.period == period, Budget.kind == kind)
            ).first()
            if row is None:
                s.add(Budget(user_id=user_id, period=period, kind=kind, limit_value=limit, set_by=set_by))
            else:
                row.limit_value = limit
                row.set_by = set_by
        self._budgets.pop(user_id, None)

    def clear_budget(self, *, user_id: int, period: str, kind: str | None = None) -> int:
        """Remove owner-set caps so the defaults apply again; returns how many were removed."""
        q = delete(Budget).where(Budget.user_id == user_id, Budget.period == period)
        if kind is not None:
            q = q.where(Budget.kind == kind)
        with self._sm.begin() as s:
            removed = int(s.execute(q).rowcount or 0)  # type: ignore[attr-defined]
        self._budgets.pop(user_id, None)
        return removed

    def claim_notice(self, *, user_id: int, period: str, kind: str, window_start: datetime) -> bool:
        """True the first time a user hits this cap in this window (the owner is told then), else False."""
        try:
            with self._sm.begin() as s:
                s.add(BudgetNotice(user_id=user_id, period=period, kind=kind, window_start=window_start))
        except IntegrityError:
            return False
        return True
