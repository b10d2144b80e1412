"""Session division with an injected clock: the boundary, active chats spared, catch-up after downtime."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from core_tools.llm import LLMClient
from core_tools.sessions import SessionManager, last_boundary
from db.conversations import Conversations
from tests.support.fakes.openai_api import FakeLLM, text

BERLIN = ZoneInfo("Europe/Berlin")


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def conversations(db_sessions: sessionmaker[Session], engine: Engine) -> Conversations:
    return Conversations(db_sessions, engine)


def test_last_boundary_daily_weekly_and_time_zones() -> None:
    at = time(4, 0)
    # 03:30 in Berlin on Tuesday: the boundary is Monday 04:00 Berlin = 03:00 UTC (CET, UTC+1).
    now = datetime(2026, 11, 24, 2, 30, tzinfo=UTC)
    assert last_boundary(now, BERLIN, at, "daily") == datetime(2026, 11, 23, 3, 0, tzinfo=UTC)
    assert last_boundary(now, BERLIN, at, "weekly") == datetime(2026, 11, 23, 3, 0, tzinfo=UTC)
    later = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)  # Thursday
    assert last_boundary(later, BERLIN, at, "daily") == datetime(2026, 11, 26, 3, 0, tzinfo=UTC)
    assert last_boundary(later, BERLIN, at, "weekly") == datetime(2026, 11, 23, 3, 0, tzinfo=UTC)
    assert last_boundary(later, BERLIN, at, "none") is None


async def test_rollover_spares_an_active_chat_then_archives_it(
    conversations: Conversations, llm: FakeLLM, llm_client: LLMClient
) -> None:
    clock = Clock(datetime(2026, 11, 22, 20, 0, tzinfo=UTC))
    manager = SessionManager(
        conversations, llm_client, default_timezone="Europe/Berlin", idle=timedelta(minutes=30), clock=clock
    )
    session = conversations.start_session(1, 1, "evening chat", now=clock.now)
    conversations.add_message(session.id, 1, 1, "user", "hello")
    # The boundary (04:00 Berlin) has passed, but the chat was active 10 minutes ago: it must wait.
    clock.now = datetime(2026, 11, 23, 3, 10, tzinfo=UTC)
    conversations_activity(conversations, session.id, clock.now - timedelta(minutes=10))
    assert await manager.rollover_due() == []
    assert llm.requests == []
    # Idle for 40 minutes now: archived, with a summary carried forward.
    llm.script(text("- Said hello."))
    clock.now = datetime(2026, 11, 23, 3, 40, tzinfo=UTC)
    (done,) = await manager.rollover_due()
    assert done.old is not None and done.old.id == session.id and done.carried == "- Said hello."
    assert conversations.get_session(session.id).ended_at == clock.now  # type: ignore[union-attr]
    assert done.new.name == "Session 2026-11-23 04:40"  # named in the user's local time
    # Nothing more to do until the next boundary.
    clock.now += timedelta(hours=5)
    assert await manager.rollover_due() == []


async def test_catch_up_after_downtime_rolls_over_once(
    conversations: Conversations, llm: FakeLLM, llm_client: LLMClient
) -> None:
    start = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
    clock = Clock(start)
    manager = SessionManager(conversations, llm_client, idle=timedelta(minutes=30), clock=clock)
    session = conversations.start_session(5, 5, "old", now=start)
    conversations.add_message(session.id, 5, 5, "user", "plan the trip")
    conversations_activity(conversations, session.id, start)
    llm.script(text("- Planned a trip."))
    clock.now = start + timedelta(days=3)  # the bot was down for three days
    (done,) = await manager.rollover_due()
    assert done.carried == "- Planned a trip."
    assert await manager.rollover_due() == []  # one archive, not one per missed day
    assert len(llm.requests) == 1


async def test_llm_failure_does_not_block_a_new_session(conversations: Conversations) -> None:
    dead = LLMClient(base_url="http://127.0.0.1:9/v1", api_key="k", model="m", max_retries=0, timeout_s=2)
    manager = SessionManager(conversations, dead)
    old = conversations.current_session(9, 9)
    conversations.add_message(old.id, 9, 9, "user", "something")
    result = await manager.new_session(9, 9, "fresh")
    assert (
        result.new.name == "fresh" and result.carried is not None and result.carried.startswith("(no summary")
    )
    await dead.close()


def conversations_activity(conversations: Conversations, session_id: str, when: datetime) -> None:
    """Set a session's last activity (what the bot's messages would have done at that time)."""
    from sqlalchemy import update

    from db.models import ChatSession

    with conversations._sm.begin() as s:  # test-only shortcut to a past time
        s.execute(update(ChatSession).where(ChatSession.id == session_id).values(last_activity_at=when))


async def test_rollover_and_new_session_work_per_chat(
    conversations: Conversations, llm: FakeLLM, llm_client: LLMClient
) -> None:
    start = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
    clock = Clock(start)
    manager = SessionManager(conversations, llm_client, idle=timedelta(minutes=30), clock=clock)
    private = conversations.current_session(5, 5, start, chat_type="private")
    group = conversations.current_session(5, -100777, start, chat_type="supergroup")
    conversations.add_message(private.id, 5, 5, "user", "private plans")
    conversations.add_message(group.id, 5, -100777, "user", "group plans")
    # /newsession in the group ends the group's session only.
    llm.script(text("- Group plans."))
    result = await manager.new_session(5, -100777)
    assert result.old is not None and result.old.id == group.id and result.new.chat_type == "supergroup"
    assert "group plans" in llm.requests[0]["messages"][1]["content"]
    assert conversations.current_session(5, 5).id == private.id
    # The rollover archives each chat's session on its own, each summarised from its own messages.
    conversations.add_message(result.new.id, 5, -100777, "user", "more group talk")
    for sid in (private.id, result.new.id):
        conversations_activity(conversations, sid, start)
    llm.script(text("- summary one."), text("- summary two."))
    clock.now = start + timedelta(days=1)
    done = await manager.rollover_due()
    assert sorted(d.new.chat_id for d in done) == [-100777, 5]
    transcripts = [r["messages"][1]["content"] for r in llm.requests[1:]]
    assert sorted(transcripts) == ["user: more group talk", "user: private plans"]
