"""Usage accounting, prices, period windows and budgets: real SQLite, the real openai client, the fake LLM."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from bot.texts.usage_report import format_budgets, format_report
from core_tools.agent import Agent, AgentConfig, TurnInput
from core_tools.errors import BudgetExceeded
from core_tools.llm import LLMClient
from core_tools.memory.embedders import OpenAIEmbedder
from core_tools.registry import ToolRegistry
from core_tools.types import ChatMessage, ToolContext
from core_tools.usage.caps import Caps, window
from core_tools.usage.prices import ModelPrice, PriceTable, parse_prices
from core_tools.usage.service import UsageService
from db.conversations import Conversations
from db.engine import make_engine, make_sessionmaker
from db.migrate import upgrade
from db.models import LLMCall, Message, TurnEvent
from db.speakers import Speaker
from db.usage import UsageLog, UsageQueries
from tests.support.fakes.openai_api import FakeLLM, call, text, tool_calls

USER, OTHER, OWNER = 7, 8, 1
PRICES = {"fake-model": ModelPrice(1.0, 2.0, 0.5)}  # $1 in, $2 out per million tokens


class Clock:
    """A settable clock."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Notices:
    """A fake notifier that keeps what it was asked to send."""

    sent: list[tuple[int, str]]

    async def send(self, chat_id: int, text: str) -> None:
        self.sent.append((chat_id, text))


@pytest.fixture
def db(tmp_path: Path) -> Iterator[tuple[Engine, sessionmaker[Session]]]:
    url = f"sqlite:///{tmp_path / 'u.db'}"
    upgrade(url)
    engine = make_engine(url)
    yield engine, make_sessionmaker(engine)
    engine.dispose()


def add_call(
    sm: sessionmaker[Session],
    at: datetime,
    prompt: int,
    completion: int,
    *,
    user: int = USER,
    purpose: str = "chat",
    model: str = "fake-model",
    cached: int = 0,
    estimated: bool = False,
) -> None:
    with sm.begin() as s:
        s.add(
            LLMCall(
                user_id=user,
                purpose=purpose,
                model=model,
                prompt_tokens=prompt,
                completion_tokens=completion,
                cached_tokens=cached,
                tokens_estimated=estimated,
                duration_ms=5,
                created_at=at,
            )
        )


def service(
    sm: sessionmaker[Session], engine: Engine, clock: Clock, caps: Caps, **kw: object
) -> UsageService:
    queries = UsageQueries(sm, engine)
    return UsageService(queries, prices=PRICES, defaults=caps, owner_id=OWNER, clock=clock, **kw)  # type: ignore[arg-type]


# ---------------------------------------------------------------- prices and windows


def test_price_lookup_and_cost() -> None:
    table = PriceTable({"my-local": ModelPrice(0, 0)})
    assert table.lookup("gpt-4o-mini") == ModelPrice(0.15, 0.60, 0.075)
    assert table.lookup("openai/gpt-4o-mini") == table.lookup("gpt-4o-mini")
    assert table.lookup("gpt-4o-mini-2024-07-18") == table.lookup("gpt-4o-mini")
    assert table.lookup("gpt-4o-2024-08-06") == ModelPrice(2.50, 10.00, 1.25)
    assert table.lookup("gpt-4ox") is None and table.lookup("llama3.1:8b") is None
    assert table.cost("llama3.1", 1000, 1000) is None
    assert table.cost("my-local", 1000, 1000) == 0
    # 1M prompt of which 400k cached, 100k completion, gpt-4o: 0.6*2.5 + 0.4*1.25 + 0.1*10
    assert table.cost("gpt-4o", 1_000_000, 100_000, 400_000) == pytest.approx(3.0)


def test_parse_prices() -> None:
    assert parse_prices('{"a": [1, 2], "b": [0.1, 0.2, 0.05], "c": {"input": 3, "output": 4}}') == {
        "a": ModelPrice(1, 2),
        "b": ModelPrice(0.1, 0.2, 0.05),
        "c": ModelPrice(3, 4),
    }
    assert parse_prices("") == {}
    for bad in ('{"a": 1}', '{"a": [1]}', '{"a": [-1, 2]}', "[1, 2]"):
        with pytest.raises(ValueError, match="LLM_PRICES"):
            parse_prices(bad)


def test_windows_follow_the_time_zone_and_the_calendar() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    now = datetime(2026, 12, 31, 23, 30, tzinfo=UTC)  # already 1 Jan 00:30 in Berlin
    day = window("daily", now, berlin)
    assert day.start == datetime(2026, 12, 31, 23, 0, tzinfo=UTC)
    assert day.end == datetime(2027, 1, 1, 23, 0, tzinfo=UTC)
    month = window("monthly", datetime(2026, 12, 15, tzinfo=UTC), ZoneInfo("UTC"))
    assert (month.start, month.end) == (datetime(2026, 12, 1, tzinfo=UTC), datetime(2027, 1, 1, tzinfo=UTC))
    week = window("week", datetime(2026, 11, 26, 12, tzinfo=UTC), ZoneInfo("UTC"))  # a Thursday
    assert week.start == datetime(2026, 11, 23, tzinfo=UTC) and week.end - week.start == timedelta(days=7)
    with pytest.raises(ValueError):
        window("year", now, berlin)


# ---------------------------------------------------------------- budgets and the clock


def test_caps_reset_with_the_period(db: tuple[Engine, sessionmaker[Session]]) -> None:
    engine, sm = db
    clock = Clock(datetime(2026, 3, 10, 13, 0, tzinfo=UTC))
    svc = service(sm, engine, clock, Caps(daily_tokens=1000, monthly_tokens=1500))
    add_call(sm, datetime(2026, 3, 10, 12, 0, tzinfo=UTC), 900, 200)
    with pytest.raises(BudgetExceeded) as exc:
        svc.check(USER, "chat")
    msg = str(exc.value)
    assert "daily token cap is 1.0k tokens" in msg and "1.1k tokens is spent today" in msg
    assert "resets at 00:00 (UTC), in 11 h 0 min" in msg
    svc.check(USER, "final")  # the closing answer of a running turn is exempt
    svc.check(OTHER, "chat")  # other users are not affected

    clock.now = datetime(2026, 3, 11, 0, 0, 1, tzinfo=UTC)  # a new day: the daily cap resets
    svc.check(USER, "summary")
    add_call(sm, datetime(2026, 3, 11, 0, 5, tzinfo=UTC), 300, 100)
    clock.now = datetime(2026, 3, 11, 1, 0, tzinfo=UTC)
    with pytest.raises(BudgetExceeded, match=r"monthly token cap .* on 1 Apr at 00:00 \(UTC\)"):
        svc.check(USER, "summary")  # background work counts against the same budget
    clock.now = datetime(2026, 4, 1, 0, 0, tzinfo=UTC)
    svc.check(USER, "chat")

    with sm() as s:
        events = s.scalars(select(TurnEvent)).all()
    assert [(e.kind, e.detail) for e in events] == [
        ("refused", "chat: daily tokens"),
        ("refused", "summary: monthly tokens"),
    ]


def test_cost_cap_uses_the_price_table_and_user_time_zone(db: tuple[Engine, sessionmaker[Session]]) -> None:
    engine, sm = db
    conv = Conversations(sm, engine)
    conv.ensure_user(USER, "Bob")
    conv.set_user_timezone(USER, "Asia/Tokyo")  # UTC+9
    clock = Clock(datetime(2026, 3, 10, 14, 0, tzinfo=UTC))  # 23:00 in Tokyo
    svc = service(sm, engine, clock, Caps(daily_usd=0.01))
    # $1 * 0.008 + $2 * 0.001 = $0.01 exactly: reached.
    add_call(sm, datetime(2026, 3, 10, 1, 0, tzinfo=UTC), 8000, 1000)
    tokyo_midnight = r"daily cost cap is \$0\.0100 .* resets at 00:00 \(Asia/Tokyo\)"
    with pytest.raises(BudgetExceeded, match=tokyo_midnight):
        svc.check(USER)
    clock.now = datetime(2026, 3, 10, 15, 0, 1, tzinfo=UTC)  # past midnight in Tokyo, still 10 March in UTC
    svc.check(USER)


def test_owner_overrides_and_notice_once(db: tuple[Engine, sessionmaker[Session]]) -> None:
    engine, sm = db
    clock = Clock(datetime(2026, 3, 10, 13, 0, tzinfo=UTC))
    svc = service(sm, engine, clock, Caps(daily_usd=5.0))
    add_call(sm, datetime(2026, 3, 10, 12, 0, tzinfo=UTC), 1_000_000, 0)  # $1.00
    svc.check(USER)
    svc.set_cap(by=OWNER, user_id=USER, period="daily", kind="cost", limit=0.5)
    assert svc.over_budget(USER) is not None
    svc.set_cap(by=OWNER, user_id=USER, period="daily", kind=None, limit=None)  # explicitly no cap
    assert svc.over_budget(USER) is None
    assert "daily cost: no cap" in format_budgets(svc, USER)
    svc.reset_cap(user_id=USER, period="daily", kind=None)  # back to the $5 default
    assert "daily cost: $1.00 of $5.00 (default)" in format_budgets(svc, USER)
    with pytest.raises(ValueError):
        svc.set_cap(by=OWNER, user_id=USER, period="weekly", kind="cost", limit=1)


async def test_owner_is_told_once_per_window(db: tuple[Engine, sessionmaker[Session]]) -> None:
    engine, sm = db
    notices = Notices([])
    clock = Clock(datetime(2026, 3, 10, 13, 0, tzinfo=UTC))
    svc = service(sm, engine, clock, Caps(daily_tokens=10), notifier=notices)
    add_call(sm, datetime(2026, 3, 10, 12, 0, tzinfo=UTC), 10, 5)
    add_call(sm, datetime(2026, 3, 10, 12, 0, tzinfo=UTC), 10, 5, user=OWNER)
    for _ in range(3):
        with pytest.raises(BudgetExceeded):
            svc.check(USER)
    assert svc.over_budget(USER) is not None
    with pytest.raises(BudgetExceeded):
        svc.check(OWNER)  # the owner sees their own refusal; no notice about themselves
    await svc.drain()
    assert len(notices.sent) == 1
    chat, msg = notices.sent[0]
    assert chat == OWNER and f"{USER} reached the daily tokens cap" in msg and f"/budget {USER} daily" in msg
    clock.now = datetime(2026, 3, 11, 13, 0, tzinfo=UTC)
    add_call(sm, datetime(2026, 3, 11, 12, 0, tzinfo=UTC), 10, 5)
    with pytest.raises(BudgetExceeded):
        svc.check(USER)  # a new window: told again
    await svc.drain()
    assert len(notices.sent) == 2


# ---------------------------------------------------------------- through the openai client and the fake LLM


def client(
    llm: FakeLLM, sm: sessionmaker[Session], engine: Engine, svc: UsageService | None = None
) -> LLMClient:
    return LLMClient(
        base_url=llm.base_url,
        api_key="sk-test",
        model="fake-model",
        max_retries=0,
        recorder=UsageLog(sm, engine),
        budget=svc,
    )


async def test_accounting_per_purpose_with_and_without_usage(
    db: tuple[Engine, sessionmaker[Session]], llm: FakeLLM
) -> None:
    engine, sm = db
    clock = Clock(datetime.now(UTC))
    svc = service(sm, engine, clock, Caps())
    c = client(llm, sm, engine, svc)
    llm.script(text("a streamed answer"), text("no usage here", usage=False), text("summary"))
    msgs = [ChatMessage("user", "hello")]
    await c.complete(msgs, purpose="chat", user_id=USER, session_id="s1")
    await c.complete(msgs, purpose="code_generate", user_id=USER, session_id="s1")
    await c.complete(msgs, purpose="summary", user_id=USER)
    await c.close()
    with sm() as s:
        rows = s.scalars(select(LLMCall).order_by(LLMCall.id)).all()
    assert [(r.purpose, r.tokens_estimated) for r in rows] == [
        ("chat", False),
        ("code_generate", True),
        ("summary", False),
    ]
    assert all(r.prompt_tokens > 0 and r.completion_tokens > 0 for r in rows)
    rep = svc.report(USER, "today")
    by = {p.purpose: p for p in rep.purposes}
    chat = rows[0]
    assert by["chat"].tokens == chat.prompt_tokens + chat.completion_tokens
    assert by["chat"].cost == pytest.approx((chat.prompt_tokens * 1.0 + chat.completion_tokens * 2.0) / 1e6)
    assert rep.spend.estimated_calls == 1
    out = format_report(rep, svc.clock())
    assert out.startswith("Usage today") and "By purpose:" in out and "  code_generate: 1 call" in out
    assert "Tokens: ~" in out and "their tokens are estimated" in out and "$" in out


async def test_unknown_price_is_shown_as_unknown(db: tuple[Engine, sessionmaker[Session]]) -> None:
    engine, sm = db
    now = datetime.now(UTC)
    svc = service(sm, engine, Clock(now), Caps(daily_usd=0.0001))
    add_call(sm, now - timedelta(seconds=1), 5000, 5000, model="llama3.1:8b")
    svc.check(USER)  # an unpriced model adds nothing to a cost cap
    out = format_report(svc.report(USER, "today"), svc.clock())
    assert "Estimated cost: unknown for llama3.1:8b" in out and "cost unknown" in out


async def test_block_before_the_request(db: tuple[Engine, sessionmaker[Session]], llm: FakeLLM) -> None:
    engine, sm = db
    now = datetime.now(UTC)
    svc = service(sm, engine, Clock(now), Caps(daily_tokens=100))
    add_call(sm, now - timedelta(seconds=1), 100, 0)
    c = client(llm, sm, engine, svc)
    with pytest.raises(BudgetExceeded):
        await c.complete([ChatMessage("user", "hi")], purpose="summary", user_id=USER)
    await c.close()
    assert llm.requests == []


# ---------------------------------------------------------------- the agent


async def lookup(ctx: ToolContext, q: str) -> dict[str, str]:
    """Look something up."""
    return {"result": f"about {q}"}


class Sink:
    async def text(self, partial: str) -> None:
        return None

    async def status(self, line: str) -> None:
        return None


def agent(
    llm: FakeLLM, sm: sessionmaker[Session], engine: Engine, svc: UsageService, rounds: int = 8
) -> Agent:
    reg = ToolRegistry(recorder=UsageLog(sm, engine))
    reg.register(lookup)
    return Agent(
        client(llm, sm, engine, svc),
        reg,
        Conversations(sm, engine),
        AgentConfig(max_tool_rounds=rounds),
        budget=svc,
    )


async def test_turn_crossing_the_cap_stops_tool_use(
    db: tuple[Engine, sessionmaker[Session]], llm: FakeLLM
) -> None:
    engine, sm = db
    notices = Notices([])
    svc = service(sm, engine, Clock(datetime.now(UTC)), Caps(daily_tokens=50), notifier=notices)
    a = agent(llm, sm, engine, svc)
    # The first request is under the cap; its reply crosses it. The tool call it asked for still runs.
    llm.script(tool_calls(call("lookup", {"q": "x"})), text("Here is what I found."))
    result = await a.run_turn(TurnInput(Speaker(USER, USER), "find x " * 20), Sink())
    assert result.stopped_by == "budget" and result.tool_calls == 1
    assert result.text == "Here is what I found."
    assert len(llm.requests) == 2 and "tools" not in llm.requests[1]
    with sm() as s:
        assert [e.kind for e in s.scalars(select(TurnEvent))] == ["budget"]
        assert [c.purpose for c in s.scalars(select(LLMCall).order_by(LLMCall.id))] == ["chat", "final"]
    await svc.drain()
    assert len(notices.sent) == 1

    # The next turn is refused before any request; the message is kept, marked refused.
    with pytest.raises(BudgetExceeded, match="daily token cap"):
        await a.run_turn(TurnInput(Speaker(USER, USER), "and y?"), Sink())
    assert len(llm.requests) == 2
    with sm() as s:
        users = s.scalars(select(Message).where(Message.role == "user")).all()
        assert [(m.content, m.status) for m in users] == [("find x " * 20, "answered"), ("and y?", "refused")]
    await a.llm.close()
    out = format_report(svc.report(USER, "today"), svc.clock())
    assert "Stopped: budget stop 1, refused (cap) 1" in out
    assert "Tool calls: 1: lookup 1" in out and "Turns: 1" in out


async def test_loop_protection_is_counted(db: tuple[Engine, sessionmaker[Session]], llm: FakeLLM) -> None:
    engine, sm = db
    svc = service(sm, engine, Clock(datetime.now(UTC)), Caps())
    a = agent(llm, sm, engine, svc, rounds=1)
    llm.script(tool_calls(call("lookup", {"q": "x"})), text("done"))
    result = await a.run_turn(TurnInput(Speaker(USER, USER), "go"), Sink())
    assert result.stopped_by == "chain_limit"
    llm.script(
        tool_calls(call("lookup", {"q": "z"})), tool_calls(call("lookup", {"q": "z"})), text("done again")
    )
    a.config.max_tool_rounds = 5
    result = await a.run_turn(TurnInput(Speaker(USER, USER), "again"), Sink())
    assert result.stopped_by == "repeat_guard"
    await a.llm.close()
    out = format_report(svc.report(USER, "week"), svc.clock())
    assert "Stopped: chain limit 1, repeated calls 1" in out and "Turns: 2" in out


# ---------------------------------------------------------------- reservations: parallel requests


def spent_tokens(sm: sessionmaker[Session], purpose: str) -> list[int]:
    with sm() as s:
        rows = s.scalars(select(LLMCall).where(LLMCall.purpose == purpose)).all()
    return [r.prompt_tokens + r.completion_tokens for r in rows]


def test_reservations_count_against_caps_until_released(db: tuple[Engine, sessionmaker[Session]]) -> None:
    engine, sm = db
    now = datetime(2026, 3, 10, 13, 0, tzinfo=UTC)
    svc = service(sm, engine, Clock(now), Caps(daily_tokens=1000))
    holds = [
        svc.reserve(USER, "chat", "fake-model", 300, 400),
        svc.reserve(USER, "summary", "fake-model", 100, 100),
    ]
    holds.append(svc.reserve(USER, "code_generate", "fake-model", 100, 100))  # 900 < 1000: admitted
    assert svc.reserved(USER) == 1100
    with pytest.raises(BudgetExceeded) as exc:
        svc.reserve(USER, "chat", "fake-model", 10, 10)
    assert (
        "cap is 1.0k tokens and 0 tokens is spent today and 1.1k tokens is reserved by requests still running"
        in str(exc.value)
    )
    with pytest.raises(BudgetExceeded):
        svc.check(USER)  # the agent's pre-turn check sees the reservations too
    holds.append(svc.reserve(USER, "final", "fake-model", 10, 10))  # never refused, but it counts
    svc.reserve(OTHER, "chat", "fake-model", 10, 10).release()  # other users are not affected
    assert "(+1.1k tokens reserved by running requests)" in format_report(svc.report(USER), svc.clock())
    for hold in holds:
        hold.release()
        hold.release()  # idempotent
    assert svc.reserved(USER) == 0
    add_call(sm, now - timedelta(minutes=1), 600, 200)  # the settled, real usage
    svc.reserve(USER, "chat", "fake-model", 500, 500).release()  # 800 < 1000
    add_call(sm, now - timedelta(minutes=1), 150, 50)
    with pytest.raises(BudgetExceeded, match=r"1\.0k tokens is spent today\. It resets"):
        svc.reserve(USER, "chat", "fake-model", 1, 1)


def test_cost_caps_reserve_the_estimate_at_the_models_price(db: tuple[Engine, sessionmaker[Session]]) -> None:
    engine, sm = db
    svc = service(sm, engine, Clock(datetime(2026, 3, 10, 13, 0, tzinfo=UTC)), Caps(daily_usd=0.001))
    hold = svc.reserve(USER, "chat", "fake-model", 300, 400)  # $0.0003 + $0.0008
    with pytest.raises(BudgetExceeded, match=r"daily cost cap is \$0\.0010 .* \$0\.0011 is reserved"):
        svc.reserve(USER, "chat", "fake-model", 1, 1)
    hold.release()
    svc.reserve(
        USER, "chat", "unpriced-model", 10**6, 10**6
    ).release()  # no price: adds nothing to a cost cap


@pytest.mark.parametrize("purpose", ["chat", "code_generate", "summary"])
async def test_parallel_llm_requests_overshoot_a_cap_by_at_most_one_request(
    db: tuple[Engine, sessionmaker[Session]], llm: FakeLLM, purpose: str
) -> None:
    engine, sm = db
    svc = service(sm, engine, Clock(datetime.now(UTC)), Caps(daily_tokens=500))
    c = client(llm, sm, engine, svc)
    c.max_completion_tokens = 50
    llm.default = text("w" * 160, delay=0.2)  # 40 completion tokens, within the request's maximum
    msgs = [ChatMessage("user", "hello")]
    out = await asyncio.gather(
        *[c.complete(msgs, purpose=purpose, user_id=USER) for _ in range(20)], return_exceptions=True
    )
    await c.close()
    refused = [o for o in out if isinstance(o, BudgetExceeded)]
    assert refused and all(not isinstance(o, Exception) or isinstance(o, BudgetExceeded) for o in out)
    spent = spent_tokens(sm, purpose)
    assert len(spent) == 20 - len(refused) == len(llm.requests)
    assert sum(spent) <= 500 + max(spent), spent
    assert all(r["max_completion_tokens"] == 50 for r in llm.requests)
    assert svc.reserved(USER) == 0


async def test_parallel_embeddings_overshoot_a_cap_by_at_most_one_request(
    db: tuple[Engine, sessionmaker[Session]], llm: FakeLLM
) -> None:
    engine, sm = db
    svc = service(sm, engine, Clock(datetime.now(UTC)), Caps(daily_tokens=300))
    emb = OpenAIEmbedder(llm.base_url, "fake-embedding", 16, recorder=UsageLog(sm, engine), budget=svc)
    out = await asyncio.gather(
        *[emb.embed_query(f"{i} " + "x" * 400, user_id=USER) for i in range(20)], return_exceptions=True
    )
    await emb.aclose()
    refused = [o for o in out if isinstance(o, BudgetExceeded)]
    spent = spent_tokens(sm, "embedding")
    assert refused and len(spent) == 20 - len(refused) == len(llm.embedding_requests)
    assert sum(spent) <= 300 + max(spent), spent
