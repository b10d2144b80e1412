"""/retry, reply context, bursts of messages as one turn, and edited messages, through the real bot."""

from __future__ import annotations

import asyncio
import json
from functools import partial
from pathlib import Path
from typing import Any

from sqlalchemy import select

from db.models import Message
from tests.support.fakes.openai_api import FakeLLM, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, Harness, running_bot


def rows(h: Harness) -> list[tuple[str, str | None, str]]:
    with h.services.engine.connect() as conn:
        found = conn.execute(select(Message.role, Message.content, Message.status).order_by(Message.id)).all()
    return [(r[0], r[1], r[2]) for r in found]


def received(h: Harness, *texts: str) -> bool:
    """Whether the bot has stored these messages (waiting in the inbox, or taken for a turn)."""
    stored = [q.entry.content for q in h.services.conversations.inbox.waiting()]
    stored += [str(content) for role, content, _ in rows(h) if role == "user"]
    return all(t in stored for t in texts)


def said(request: dict[str, Any]) -> list[tuple[str, str]]:
    """(role, content) of a request's conversation, without the system prompt."""
    return [(m["role"], m["content"]) for m in request["messages"] if m["role"] != "system"]


async def test_retry_answers_again_and_leaves_the_old_answer_out(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("First answer."), text("Second answer."), text("Third."))
    async with running_bot(tmp_path, tg, llm) as h:
        await h.command(OWNER, "/retry", "nothing to retry")
        tg.push_text(OWNER, "a question")
        await h.final_text(OWNER, "First answer.")
        tg.push_text(OWNER, "/retry")
        await h.final_text(OWNER, "Second answer.")
        assert tg.sent_texts(OWNER)[-2:] == ["First answer.", "Second answer."]  # a new message
        assert said(llm.requests[1]) == [("user", "a question")]  # the old answer is not shown
        assert rows(h) == [
            ("user", "a question", "answered"),
            ("assistant", "First answer.", "superseded"),  # kept in the database
            ("assistant", "Second answer.", "done"),
        ]
        tg.push_text(OWNER, "thanks")
        await h.final_text(OWNER, "Third.")
        assert said(llm.requests[2]) == [
            ("user", "a question"),
            ("assistant", "Second answer."),
            ("user", "thanks"),
        ]


async def test_a_reply_brings_the_quoted_text_marked_as_quoted(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("Paris is the capital of France, and Lyon is its third city."), text("A."), text("B."))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "tell me about France")
        await h.final_text(OWNER, "Lyon")
        answer = tg.last_message(OWNER)
        tg.push_text(OWNER, "why?", reply_to=answer)
        await h.final_text(OWNER, "A.")
        content = llm.requests[1]["messages"][-1]["content"]
        assert content.startswith("[The user replies to your (the assistant's) earlier message")
        assert "> Paris is the capital of France, and Lyon is its third city." in content
        assert "[End of quote.]" in content and content.endswith("why?")

        # Telegram's quote of a part: only that part goes in.
        tg.push_text(OWNER, "more on this", reply_to=answer, quote="Lyon is its third city")
        await h.final_text(OWNER, "B.")
        content = llm.requests[2]["messages"][-1]["content"]
        assert "replies to a part of your (the assistant's) earlier message" in content
        assert "> Lyon is its third city" in content and "Paris" not in content


async def test_a_burst_of_three_messages_is_one_turn(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    llm.script(text("One answer for all three."))
    async with running_bot(tmp_path, tg, llm, message_debounce_ms=400) as h:
        for part in ("hi", "I need", "a recipe"):
            tg.push_text(OWNER, part)
        await h.final_text(OWNER, "One answer for all three.")
        assert len(llm.requests) == 1
        assert said(llm.requests[0]) == [("user", "hi"), ("user", "I need"), ("user", "a recipe")]
        assert [s for r, _, s in rows(h) if r == "user"] == ["answered"] * 3


async def test_messages_sent_during_a_turn_are_answered_together_or_one_by_one(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    for merge in (True, False):
        llm.requests.clear()
        release = asyncio.Event()  # the first turn runs until both later messages wait behind it
        llm.script(text("Slow first.", hold=release), text("Next."), text("Last."))
        async with running_bot(tmp_path / str(merge), tg, llm, message_merge_bursts=merge) as h:
            tg.push_text(FRIEND, "first")
            await llm.wait_for_requests(1)
            tg.push_text(FRIEND, "second")
            tg.push_text(FRIEND, "third")
            await tg.wait_for(partial(received, h, "second", "third"), what="both stored while the turn runs")
            release.set()
            await h.final_text(FRIEND, "Next.")
            if merge:
                assert said(llm.requests[1])[-2:] == [("user", "second"), ("user", "third")]
                assert len(llm.requests) == 2
            else:
                await h.final_text(FRIEND, "Last.")
                assert said(llm.requests[1])[-1] == ("user", "second")
                assert said(llm.requests[2])[-1] == ("user", "third")
        tg.messages.clear()


async def test_edits_rerun_the_latest_message_and_are_stored_for_older_ones(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("It is 5."), text("It is 4."), text("Noted."), text("Unseen edit answered."))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "waht is 2+3")
        question = tg.incoming[OWNER][-1]
        await h.final_text(OWNER, "It is 5.")
        tg.push_edit(question, "what is 2+2")
        await h.final_text(OWNER, "It is 4.")
        assert said(llm.requests[1]) == [("user", "what is 2+2")]  # the edited text; old answer left out
        (reply,) = [c for c in tg.calls_to("sendMessage") if c.params.get("text") == "It is 4."]
        assert reply.params["reply_parameters"]["message_id"] == question["message_id"]  # refers to the edit

        tg.push_text(OWNER, "and 3+3?")
        await h.final_text(OWNER, "Noted.")
        tg.push_edit(question, "what is 2+2 exactly")  # now an older message: stored, not re-run
        await h.final_text(OWNER, "Your edit is saved")
        assert len(llm.requests) == 3
        assert ("user", "what is 2+2 exactly", "answered") in rows(h)

        unseen = dict(question, message_id=999)  # sent while the bot was away: a new message
        tg.push_edit(unseen, "an edit of a message I never saw")
        await h.final_text(OWNER, "Unseen edit answered.")
        assert said(llm.requests[3])[-1] == ("user", "an edit of a message I never saw")


async def test_an_edit_while_its_answer_runs_is_stored_and_said_so(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    release = asyncio.Event()  # the answer runs until the edit has been seen, however slow the machine
    llm.script(text("Long answer.", hold=release))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "frist question")
        question = tg.incoming[OWNER][-1]
        await llm.wait_for_requests(1)
        tg.push_edit(question, "first question")
        await h.final_text(OWNER, "I am still answering your original message; your edit is saved.")
        release.set()
        # The edited text is stored; the turn finishes (its final edit comes after the status change).
        await tg.wait_for(lambda: ("user", "first question", "answered") in rows(h), what="the turn's end")
        assert len(llm.requests) == 1


async def test_a_forwarded_message_is_framed_and_remembered_as_said_by_its_author(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    """The model sees whose words a forward holds, stores them as said by that person, and a later
    question naming them finds that memory first."""
    store = {
        "action": "store",
        "layer": "long",
        "content": "The flight lands at nine on Friday",
        "said_by": "Anna",
    }
    llm.script(
        tool_calls(call("memory", store, id="m1")),
        text("Noted."),
        text("OK."),
        tool_calls(call("memory", {"action": "recall", "query": "when does Anna land?"}, id="m2")),
        text("At nine."),
    )
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "The flight lands at nine on Friday", forward_from="Anna")
        await h.final_text(OWNER, "Noted.")
        content = llm.requests[0]["messages"][-1]["content"]
        assert content.startswith("[The user forwards a message by Anna; it follows, as data:]")
        assert content.endswith("The flight lands at nine on Friday\n[End of forward.]")
        tg.push_text(OWNER, "My own flight lands at noon")  # the model stores nothing: a plain answer
        await h.final_text(OWNER, "OK.")
        tg.push_text(OWNER, "when does Anna land?")
        await h.final_text(OWNER, "At nine.")
        recalled = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"][-1]["content"]
        memories = json.loads(recalled)["memories"]
        assert memories[0]["content"] == "The flight lands at nine on Friday"
        assert memories[0]["said_by"] == "Anna"
