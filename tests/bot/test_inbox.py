"""Messages are stored the moment they arrive: a restart while they wait loses nothing, and a waiting
message stays out of the running turn's history until its own turn."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select

from bot.adapter.front import TelegramFront
from bot.runtime.queue import Incoming
from bot.runtime.runner import TurnRunner
from core_tools.types import ToolContext
from db.engine import make_engine
from db.models import InboxMessage, Message, Replica
from db.runtime import Entry
from db.speakers import Speaker
from tests.support import harness
from tests.support.databases import both_databases
from tests.support.fakes.openai_api import FakeLLM, call, hang, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, STRANGER, running_bot
from tests.support.processes import bot_process, fake_env

db_kind = both_databases()  # SQLite and PostgreSQL: the inbox's SQL (db/inbox.py, db/replicas.py)
pytestmark = pytest.mark.usefixtures("bot_database")  # its bots run on the test's database


def waiting(engine: Engine) -> list[str]:
    """The texts waiting in the inbox (none while the table does not exist yet)."""
    with engine.connect() as conn:
        try:
            return [r[0] for r in conn.execute(select(InboxMessage.content).order_by(InboxMessage.id))]
        except Exception:  # the process has not migrated the database yet
            return []


def said(request: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(role, content) of a request's conversation, without the system prompt."""
    return [(m["role"], m.get("content")) for m in request["messages"] if m["role"] != "system"]


@pytest.mark.slow  # a `python -m bot` process killed and restarted
async def test_kill_9_while_a_message_waits_then_restart_answers_it(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(hang(60))
    # The harness's database (a fresh PostgreSQL one on that run), so the restarted bot below finds it.
    url = harness.DATABASE_URL or f"sqlite:///{tmp_path / 'data' / 'assistant.db'}"
    env = fake_env(tmp_path, tg, llm, url)
    async with bot_process(tmp_path, env) as proc:
        # A cold start on a busy machine, then a first long poll that waits (10 s) for updates.
        await tg.wait_for_call("getUpdates", timeout=120)
        tg.push_text(OWNER, "Plan my trip to Lisbon")
        await llm.wait_for_requests(1, timeout=120)  # its turn runs (the LLM stream hangs)
        tg.push_text(OWNER, "Also find me a hotel in Alfama")
        engine = make_engine(url)
        try:
            await tg.wait_for(lambda: waiting(engine), timeout=60, what="the second message stored")
            assert waiting(engine) == ["Also find me a hotel in Alfama"]
        finally:
            engine.dispose()
        await proc.kill()
    llm.script(text("Casa Alfama has rooms."))
    async with running_bot(tmp_path, tg, llm) as h:
        # Restarted on the same host in the same pid namespace, where the old pid is provably gone: the
        # killed process is forgotten at once, not after its heartbeat's lease (bot/runtime/replica.py).
        with h.services.engine.connect() as conn:
            assert conn.execute(select(Replica.id)).scalars().all() == [h.services.replica.id]
        notice = await h.final_text(OWNER, "I was restarted")
        assert "Plan my trip to Lisbon" in notice  # the turn that was cut is announced
        await h.final_text(OWNER, "Casa Alfama has rooms.")  # the waiting message is answered
        users = [c for r, c in said(llm.requests[-1]) if r == "user"]
        assert users == ["Plan my trip to Lisbon", "Also find me a hotel in Alfama"]
        assert waiting(h.services.engine) == []
        with h.services.engine.connect() as conn:
            stored = conn.execute(select(Message.content, Message.status).where(Message.role == "user")).all()
        assert [tuple(r) for r in stored] == [
            ("Plan my trip to Lisbon", "interrupted"),
            ("Also find me a hotel in Alfama", "answered"),
        ]


async def test_a_message_sent_during_a_tool_call_waits_for_its_own_turn(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def look_up_flights(ctx: ToolContext, city: str) -> str:
        """Look up flights to a city."""
        started.set()
        await asyncio.wait_for(release.wait(), timeout=60)
        return f"3 flights to {city}"

    def setup(services: Any) -> None:
        services.registry.register(look_up_flights)

    llm.script(
        tool_calls(call("look_up_flights", {"city": "Lisbon"}, id="c1")),
        text("There are 3 flights."),
        text("The cheapest is on Tuesday."),
    )
    async with running_bot(tmp_path, tg, llm, setup=setup) as h:
        tg.push_text(OWNER, "Flights to Lisbon?")
        await asyncio.wait_for(started.wait(), timeout=60)  # the tool call is stored, its result is not
        tg.push_text(OWNER, "Which is cheapest?")
        await tg.wait_for(lambda: waiting(h.services.engine), what="the second message stored")
        release.set()
        await h.final_text(OWNER, "The cheapest is on Tuesday.")
        first_turn = said(llm.requests[1])
        assert first_turn[0] == ("user", "Flights to Lisbon?")
        assert [r for r, _ in first_turn] == ["user", "assistant", "tool"]  # nothing between call and result
        assert "Which is cheapest?" not in str(llm.requests[1]["messages"])
        second_turn = said(llm.requests[2])
        assert second_turn[-2:] == [("assistant", "There are 3 flights."), ("user", "Which is cheapest?")]
        assert [r for r, _ in second_turn] == ["user", "assistant", "tool", "assistant", "user"]
        assert waiting(h.services.engine) == []


async def test_an_edit_of_a_waiting_message_changes_what_waits(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    release = asyncio.Event()  # the first turn runs until the edit is stored, however slow the machine
    llm.script(text("Slow first.", hold=release), text("Answered the edit."))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "first")
        await llm.wait_for_requests(1)
        tg.push_text(OWNER, "waht about tomorow?")
        second = tg.incoming[OWNER][-1]
        await tg.wait_for(lambda: waiting(h.services.engine), what="the second message stored")
        tg.push_edit(second, "what about tomorrow?")
        await tg.wait_for(
            lambda: waiting(h.services.engine) == ["what about tomorrow?"], what="the stored text edited"
        )
        release.set()
        await h.final_text(OWNER, "Answered the edit.")
        assert said(llm.requests[1])[-1] == ("user", "what about tomorrow?")
        assert not any("Your edit is saved" in t for t in tg.sent_texts(OWNER))


async def test_messages_left_waiting_are_answered_at_start_in_order(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    group = -100777

    def leftovers(services: Any) -> None:
        inbox = services.conversations.inbox
        inbox.put(Entry(Speaker(OWNER, OWNER, "private", "Ann"), "first part", tg_message_id=5))
        inbox.put(Entry(Speaker(STRANGER, STRANGER, "private", "Eve"), "let me in", tg_message_id=6))
        inbox.put(Entry(Speaker(FRIEND, group, "supergroup", "Bob"), "hello group", tg_message_id=7))
        inbox.put(Entry(Speaker(OWNER, OWNER, "private", "Ann"), "second part", tg_message_id=8))

    def answer(body: dict[str, Any]) -> Any:
        return text("Group answer." if "hello group" in str(body) else "Private answer.")

    llm.script(answer, answer, text("Third answered."))
    async with running_bot(tmp_path, tg, llm, setup=leftovers, allowed_chat_ids=str(group)) as h:
        await h.final_text(OWNER, "Private answer.")
        await h.final_text(group, "Group answer.")
        private = next(r for r in llm.requests if "first part" in str(r))
        assert said(private) == [("user", "first part"), ("user", "second part")]  # one turn, in order
        assert "let me in" not in str(llm.requests)  # no longer allowed: not answered
        assert tg.sent_texts(STRANGER) == []
        tg.push_text(OWNER, "third part")
        await h.final_text(OWNER, "Third answered.")
        assert [c for r, c in said(llm.requests[2]) if r == "user"] == [
            "first part",
            "second part",
            "third part",
        ]
        assert waiting(h.services.engine) == []


async def test_a_turn_stopped_before_it_began_keeps_its_message_as_stopped(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        s = h.services
        front = TelegramFront(h.app.bot, s.conversations.topics)
        runner = TurnRunner(s.agent, s.conversations, s.code, s.replica.chats, front, debounce_s=0)
        item = Incoming(Entry(Speaker(OWNER, OWNER, "private", "Ann"), "never mind", tg_message_id=42))
        submitted = asyncio.create_task(runner.submit(item))
        # Runs right after the submit's first step, which creates the turn's task but does not start it.
        stopped = asyncio.create_task(runner.stop(OWNER, OWNER, True))
        assert await stopped is None  # it stopped a turn
        await submitted
        assert tg.sent_texts(OWNER) == ["(stopped)"] and llm.requests == []
        assert waiting(s.engine) == []  # not answered again at the next start
        with s.engine.connect() as conn:
            stored = conn.execute(select(Message.content, Message.status, Message.tg_message_id)).all()
        assert [tuple(r) for r in stored] == [("never mind", "stopped", 42)]
