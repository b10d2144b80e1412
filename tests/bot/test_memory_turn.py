"""Memory and sessions through the whole stack: prompt context, the tool, /memory, /timezone, rollover."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

from bot.wiring import Services
from db.models import utcnow
from tests.fakes.openai_api import FakeLLM, call, text, tool_calls
from tests.fakes.telegram_api import FakeTelegram
from tests.harness import OWNER, running_bot


async def test_relevant_memories_reach_the_system_prompt(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("In September."))
    async with running_bot(tmp_path, tg, llm) as h:
        await h.services.memory.store(
            OWNER, "long", "My daughter Mia starts school in September", category="fact"
        )
        tg.push_text(OWNER, "when does my kid begin classes?")
        await h.final_text(OWNER, "In September.")
        system = llm.requests[0]["messages"][0]["content"]
        assert "Mia starts school in September" in system and "<memories" in system


async def test_memory_tool_and_memory_command(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    llm.script(
        tool_calls(
            call(
                "memory",
                {
                    "action": "store",
                    "layer": "long",
                    "content": "User prefers green tea",
                    "category": "preference",
                },
            )
        ),
        text("Noted: green tea."),
    )
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "remember that I prefer green tea")
        await h.final_text(OWNER, "Noted: green tea.")
        tg.push_text(OWNER, "/memory")
        listing = await h.final_text(OWNER, "Long-term:")
        assert "User prefers green tea" in listing
        match = re.search(r"id ([0-9a-f-]{8,})", listing)
        assert match
        tg.push_text(OWNER, "/memory search hot drinks I like")
        await h.final_text(OWNER, "green tea [preference")
        tg.push_text(OWNER, "/memory forget not-an-id")
        await h.final_text(OWNER, "No memory with id not-an-id")
        tg.push_text(OWNER, f"/memory forget {match.group(1)}")
        await h.final_text(OWNER, "Forgotten.")
        tg.push_text(OWNER, "/memory bogus")
        await h.final_text(OWNER, "Usage: /memory")
        assert await h.services.memory.list_memories(OWNER) == []


async def test_timezone_command_changes_the_prompt_clock(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("ok then"))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "/timezone Mars/Olympus")
        await h.final_text(OWNER, "I don't know the time zone 'Mars/Olympus'")
        tg.push_text(OWNER, "/timezone Asia/Tokyo")
        await h.final_text(OWNER, "Time zone set to Asia/Tokyo")
        tg.push_text(OWNER, "what time is it?")
        await h.final_text(OWNER, "ok then")
        assert "(Asia/Tokyo)" in llm.requests[0]["messages"][0]["content"]


async def test_the_model_can_start_a_new_session(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    llm.script(
        tool_calls(call("memory", {"action": "new_session", "content": "Learning Rust"})),
        text("- The user wants to learn Rust."),  # the summary of the old session
        text("New session started."),
        text("Let us begin with ownership."),
    )
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "let's start fresh for learning Rust")
        await h.final_text(OWNER, "New session started.")
        assert "Started a new session: Learning Rust" in llm.requests[2]["messages"][-1]["content"]
        tg.push_text(OWNER, "go on")
        await h.final_text(OWNER, "Let us begin with ownership.")
        assert [m["content"] for m in llm.requests[-1]["messages"][1:]] == ["go on"]
        # The old session's summary is carried into the new session's prompt.
        system = llm.requests[-1]["messages"][0]["content"]
        assert "Summary of the previous session" in system and "The user wants to learn Rust." in system


async def test_rollover_missed_while_down_is_caught_up_at_start(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    def old_session(services: Services) -> None:
        yesterday = utcnow() - timedelta(days=1, hours=1)
        s = services.conversations.start_session(OWNER, OWNER, "yesterday", now=yesterday)
        services.conversations.add_message(s.id, OWNER, OWNER, "user", "we talked yesterday")

    llm.script(text("- Talked yesterday."))
    async with running_bot(tmp_path, tg, llm, setup=old_session, session_idle_minutes=0) as h:
        notice = await h.final_text(OWNER, "New day, new session")
        assert "Talked yesterday." in notice
        summary = h.services.conversations.last_summary(OWNER)
        assert summary == ("yesterday", "- Talked yesterday.")
