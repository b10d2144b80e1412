"""A message is answered at once, and a burst still gets one answer: a message the same person sends before
the answer starts is folded into it (bot/runtime/runner.py), in Telegram and in the terminal chat."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import select

from bot.runtime.endings import STOPPED_MARK
from db.models import Message
from tests.bot.test_terminal import terminal
from tests.support.fakes.openai_api import FakeLLM, hang, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, Harness, running_bot


def users(request: dict[str, Any]) -> list[str]:
    return [str(m["content"]) for m in request["messages"] if m["role"] == "user"]


def stored(h: Harness) -> list[tuple[str, str | None, str]]:
    with h.services.engine.connect() as conn:
        rows = conn.execute(select(Message.role, Message.content, Message.status).order_by(Message.id)).all()
    return [(r[0], r[1], r[2]) for r in rows]


async def test_a_message_sent_before_the_answer_starts_is_answered_with_it(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    # The first request gets no token (the model is still thinking) when the second message comes.
    llm.script(hang(60), text("Lisbon, and a hotel in Alfama."))
    async with running_bot(tmp_path, tg, llm, message_fold_bursts=True) as h:
        tg.push_text(OWNER, "Plan my trip to Lisbon")
        await llm.wait_for_requests(1)  # answered at once: no wait for more messages
        tg.push_text(OWNER, "and find me a hotel")
        await h.final_text(OWNER, "Lisbon, and a hotel in Alfama.")
        assert users(llm.requests[-1]) == ["Plan my trip to Lisbon", "and find me a hotel"]
        assert tg.sent_texts(OWNER) == ["Lisbon, and a hotel in Alfama."]  # one answer, nothing stopped
        assert stored(h) == [
            ("user", "Plan my trip to Lisbon", "answered"),
            ("user", "and find me a hotel", "answered"),
            ("assistant", "Lisbon, and a hotel in Alfama.", "done"),
        ]
        tg.push_text(OWNER, "thanks")  # the chat goes on as after any turn
        llm.script(text("You are welcome."))
        await h.final_text(OWNER, "You are welcome.")
        assert users(llm.requests[-1]) == ["Plan my trip to Lisbon", "and find me a hotel", "thanks"]


async def test_a_message_sent_once_the_answer_streams_gets_its_own_turn(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(hang(60, partial="Let me think"), text("The hotel is booked."))
    async with running_bot(tmp_path, tg, llm, message_fold_bursts=True) as h:
        tg.push_text(OWNER, "Plan my trip")
        await h.final_text(OWNER, "Let me think")  # the answer is on screen: nothing folds into it now
        tg.push_text(OWNER, "and book the hotel")
        tg.push_text(OWNER, "/stop")
        await h.final_text(OWNER, STOPPED_MARK)
        await h.final_text(OWNER, "The hotel is booked.")
        assert users(llm.requests[-1]) == ["Plan my trip", "and book the hotel"]
        assert [s for r, _, s in stored(h) if r == "user"] == ["stopped", "answered"]


async def test_the_terminal_answers_a_burst_once_and_queues_what_comes_during_an_answer(
    tmp_path: Path, llm: FakeLLM
) -> None:
    llm.script(hang(60), text("Both at once."))
    llm.script(hang(60, partial="Working"), text("The two queued ones."))
    llm.script(text("First answer."), text("Second answer."))
    async with terminal(tmp_path, llm, MESSAGE_FOLD_BURSTS="true") as term:
        at = await term.send("plan my trip")
        await llm.wait_for_requests(1)
        await term.send("and a hotel")  # before the answer started: folded in
        seen = await term.wait_for("Both at once.", after=at)
        await term.ready()
        assert users(llm.requests[-1]) == ["plan my trip", "and a hotel"]
        assert seen.count("assistant> ") == 1 and STOPPED_MARK not in seen

        at = await term.send("a long one")
        await term.wait_for("Working", after=at)
        await term.send("then this")  # typed while the answer is written: waits in the inbox
        await term.send("and this")
        await term.send("/stop")
        await term.wait_for(STOPPED_MARK, "The two queued ones.", after=at)
        await term.ready()
        assert users(llm.requests[-1])[-3:] == ["a long one", "then this", "and this"]  # one turn

        await term.ask("hello", "First answer.")
        seen = await term.ask("/retry", "Second answer.")
        assert users(llm.requests[-1])[-1] == "hello" and "First answer." not in str(llm.requests[-1])
        assert await term.quit() == 0
    assert "Traceback" not in term.errors()
