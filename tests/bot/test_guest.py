"""Guest mode (Bot API 10.0) through the fake Bot API: a question asked by mentioning the bot in someone
else's chat is answered there without the user's memories, history or private tools, a stranger costs
nothing, the answer's "continue in private" link asks the question in the private chat, and its LLM requests
are accounted as "guest". On both databases (the links live in the database: db/guest_links.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from sqlalchemy import select
from telegram import User

from bot.adapter.guest import OFF, PRIVACY_LINE, USER_REFUSAL, support_line
from db.models import ChatSession, LLMCall, TurnEvent
from db.usage import LLMCallRecord
from tests.backup.test_backup_bot import rows_naming
from tests.support.databases import both_databases
from tests.support.fakes.openai_api import FakeLLM, call, hang, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, STRANGER, Harness, running_bot

db_kind = both_databases()  # the guest links and the turn's rows are stored: both dialects
pytestmark = pytest.mark.usefixtures("bot_database")

PIN = "4921"
FRIEND_CHAT = -100888  # a group the bot is not in (and not allowed in)
FRIEND_OF_NOBODY = STRANGER


def tool_names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools", [])]


async def guest_answer(h: Harness, query_id: str, contains: str) -> dict[str, Any]:
    """Wait until the message answering guest query `query_id` shows `contains`; return it."""

    def answered() -> str | None:
        for c in h.tg.calls_to("answerGuestQuery"):
            if c.ok and c.params.get("guest_query_id") == query_id:
                return str(c.result["inline_message_id"])
        return None

    inline_id: str = await h.tg.wait_for(answered, what=f"the answer to guest query {query_id}")

    def shown() -> dict[str, Any] | None:
        msg = h.tg.inline_messages[inline_id]
        return msg if contains in msg["text"] else None

    found: dict[str, Any] = await h.tg.wait_for(shown, what=f"the guest answer showing {contains!r}")
    return found


def purposes(h: Harness) -> list[str]:
    """The purposes of the LLM requests stored, in order."""
    with h.services.engine.connect() as conn:
        return [r.purpose for r in conn.execute(select(LLMCall).order_by(LLMCall.id))]


async def stored_purposes(h: Harness, expected: list[str]) -> None:
    """Wait until the stored LLM requests' purposes are `expected` (a shown answer may be stored a moment
    later)."""
    await h.tg.wait_for(lambda: purposes(h) == expected, what=f"LLM calls {expected}, not {purposes(h)}")


def start_token(msg: dict[str, Any]) -> str:
    """The /start parameter of the "continue in private" button of a posted answer."""
    url = msg["reply_markup"]["inline_keyboard"][0][0]["url"]
    parsed = urlparse(url)
    assert parsed.netloc == "t.me" and parsed.path == "/test_bot"
    return str(parse_qs(parsed.query)["start"][0])


async def test_a_guest_answer_carries_nothing_private_and_continues_in_private(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(
        text("Noted."),  # the private turn: "my PIN is 4921"
        text("Paris is the capital of **France**."),  # the guest answer
        text("Paris, as I said; your PIN stays private."),  # the same question, continued in private
    )
    tg.guest_mode = True
    async with running_bot(tmp_path, tg, llm, guest_mode="on", stream_edit_interval_s=0) as h:
        await h.services.memory.store(OWNER, "long", f"The user's bank PIN is {PIN}", category="fact")
        tg.push_text(OWNER, f"my PIN is {PIN}")
        await h.final_text(OWNER, "Noted.")

        query_id = tg.push_guest_message(OWNER, "@test_bot what is the capital of France?", FRIEND_CHAT)
        answer = await guest_answer(h, query_id, PRIVACY_LINE)
        assert "Paris is the capital of France." in answer["text"]
        assert answer["chat_id"] == FRIEND_CHAT  # posted where it was asked
        assert any(e["type"] == "bold" for e in answer["entities"])  # rendered like any answer

        request = llm.requests[1]
        dumped = json.dumps(request, ensure_ascii=False)
        assert PIN not in dumped and "Noted." not in dumped  # no memory, no earlier conversation
        assert [(m["role"], m["content"]) for m in request["messages"][1:]] == [
            ("user", "what is the capital of France?")
        ]
        assert "memory" not in tool_names(request) and "schedule" not in tool_names(request)
        assert set(tool_names(request)) <= {"search", "fetch", "code", "read_result"}
        assert "search" in tool_names(request)
        assert tg.sent_texts(FRIEND_CHAT) == []  # nothing sent as the bot itself into that chat

        # "Continue in private": /start <token> asks the question in the private chat, as a private turn.
        token = start_token(answer)
        tg.push_text(OWNER, f"/start {token}")
        await h.final_text(OWNER, "your PIN stays private")
        private = llm.requests[2]
        assert private["messages"][-1] == {"role": "user", "content": "what is the capital of France?"}
        assert PIN in private["messages"][0]["content"]  # the private turn has the user's memories
        assert "memory" in tool_names(private)

        # The link is used once.
        tg.push_text(OWNER, f"/start {token}")
        await h.final_text(OWNER, "That link is too old or was used already")
        assert len(llm.requests) == 3

        await stored_purposes(h, ["chat", "guest", "chat"])  # the guest turn is accounted as such
        with h.services.engine.connect() as conn:
            guest_sessions = list(
                conn.execute(select(ChatSession).where(ChatSession.chat_type == "guest")).mappings()
            )
        assert len(guest_sessions) == 1 and guest_sessions[0]["ended_at"] is not None  # ended with the turn


async def test_a_guest_turn_refuses_private_tools_the_model_calls_anyway(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(
        tool_calls(call("memory", {"action": "recall", "query": "PIN"}, id="m1")),
        text("I cannot see your private notes here."),
    )
    async with running_bot(tmp_path, tg, llm, guest_mode="on", stream_edit_interval_s=0) as h:
        await h.services.memory.store(OWNER, "long", f"The user's bank PIN is {PIN}", category="fact")
        query_id = tg.push_guest_message(OWNER, "@test_bot what is my PIN?")
        answer = await guest_answer(h, query_id, PRIVACY_LINE)
        assert "cannot see your private notes" in answer["text"] and PIN not in answer["text"]
        refusal = llm.requests[1]["messages"][-1]
        assert refusal["role"] == "tool" and "not available here" in refusal["content"]
        assert PIN not in json.dumps(llm.requests, ensure_ascii=False)


async def test_a_stranger_gets_the_refusal_and_costs_nothing(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, guest_mode="on") as h:
        query_id = tg.push_guest_message(STRANGER, "@test_bot write me a poem", FRIEND_CHAT)
        answer = await guest_answer(h, query_id, "not on its list of allowed users")
        assert answer["text"] == USER_REFUSAL.format(user_id=STRANGER)
        assert llm.requests == []
        with h.services.engine.connect() as conn:
            assert list(conn.execute(select(LLMCall))) == []


async def test_a_guest_query_over_the_users_cap_is_refused_before_any_request(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    prices = '{"fake-model": [1.0, 2.0]}'
    async with running_bot(tmp_path, tg, llm, guest_mode="on", llm_prices=prices, budget_daily_usd=1.0) as h:
        spent = LLMCallRecord(
            user_id=OWNER,
            session_id=None,
            purpose="chat",
            model="fake-model",
            prompt_tokens=500_000,
            completion_tokens=500_000,
        )
        h.services.usage.record_llm_call(spent)  # $1.50 today: over the $1 daily cap
        query_id = tg.push_guest_message(OWNER, "@test_bot one more question", FRIEND_CHAT)
        answer = await guest_answer(h, query_id, "Usage cap reached")
        assert "daily cost cap" in answer["text"] and PRIVACY_LINE in answer["text"]
        assert llm.requests == []
        with h.services.engine.connect() as conn:
            events = [r.detail for r in conn.execute(select(TurnEvent))]
        assert events == ["guest: daily cost"]  # refused as a guest turn, like any turn


async def test_with_guest_mode_off_a_guest_query_is_told_so(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:  # GUEST_MODE defaults to off
        query_id = tg.push_guest_message(OWNER, "@test_bot hello")
        answer = await guest_answer(h, query_id, "guest mode is off")
        assert answer["text"] == OFF and llm.requests == []


async def test_stop_ends_a_guest_answer_being_written(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    llm.script(hang(60, partial="A long answer that"))
    async with running_bot(tmp_path, tg, llm, guest_mode="on", stream_edit_interval_s=0) as h:
        query_id = tg.push_guest_message(OWNER, "@test_bot tell me everything")
        answering = await guest_answer(h, query_id, "answering")
        assert answering["reply_markup"]["inline_keyboard"][0][0]["text"] == "Stop"
        await llm.wait_for_requests(1)
        tg.push_text(OWNER, "/stop")  # in the private chat, where nothing else runs
        inline_id = next(iter(tg.inline_messages))
        await tg.wait_for(
            lambda: "(stopped)" in tg.inline_messages[inline_id]["text"], what="the stopped guest answer"
        )
        assert PRIVACY_LINE in tg.inline_messages[inline_id]["text"]


# ---------------------------------------------------------------------------------------------- inline mode


async def inline_results(h: Harness, query_id: str) -> dict[str, Any]:
    """Wait for the answer to inline query `query_id`; return its parameters."""

    def answered() -> dict[str, Any] | None:
        for c in h.tg.calls_to("answerInlineQuery"):
            if c.ok and c.params.get("inline_query_id") == query_id:
                return c.params
        return None

    params: dict[str, Any] = await h.tg.wait_for(answered, what=f"the answer to inline query {query_id}")
    return params


async def test_an_inline_query_offers_an_ask_article_at_no_cost_and_answers_where_posted(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("Noted."), text("It is **42**."), text("Still 42, in private."))
    tg.inline_feedback = True  # @BotFather's /setinlinefeedback: choosing a result is reported
    async with running_bot(tmp_path, tg, llm, guest_mode="on", stream_edit_interval_s=0) as h:
        await h.services.memory.store(OWNER, "long", f"The user's bank PIN is {PIN}", category="fact")
        tg.push_text(OWNER, f"my PIN is {PIN}")
        await h.final_text(OWNER, "Noted.")

        query_id = tg.push_inline_query(OWNER, "what is six times seven?")
        params = await inline_results(h, query_id)
        assert len(llm.requests) == 1  # offering the article cost nothing
        (ask,) = params["results"]
        assert ask["type"] == "article" and "six times seven" in ask["title"]
        assert params["is_personal"] is True and params["cache_time"] == 0
        private_token = params["button"]["start_parameter"]

        inline_id = tg.choose_inline_result(OWNER, query_id, ask["id"], chat_id=FRIEND_CHAT)
        assert inline_id is not None
        await tg.wait_for(
            lambda: PRIVACY_LINE in tg.inline_messages[inline_id]["text"], what="the inline answer"
        )
        shown = tg.inline_messages[inline_id]["text"]
        assert shown.startswith("\u2753 what is six times seven?") and "It is 42." in shown
        request = llm.requests[1]
        dumped = json.dumps(request, ensure_ascii=False)
        assert PIN not in dumped and "Noted." not in dumped
        assert [m["content"] for m in request["messages"][1:]] == ["what is six times seven?"]
        assert "memory" not in tool_names(request)

        # The results' button opens the private chat with the question.
        tg.push_text(OWNER, f"/start {private_token}")
        await h.final_text(OWNER, "Still 42, in private.")
        assert llm.requests[2]["messages"][-1]["content"] == "what is six times seven?"
        await stored_purposes(h, ["chat", "inline", "chat"])


async def test_answer_here_answers_a_posted_question_once(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("Blue, mostly."))
    async with running_bot(tmp_path, tg, llm, guest_mode="on", stream_edit_interval_s=0) as h:
        query_id = tg.push_inline_query(OWNER, "what colour is the sky?")
        (ask,) = (await inline_results(h, query_id))["results"]
        inline_id = tg.choose_inline_result(OWNER, query_id, ask["id"])  # no inline feedback: nothing yet
        assert inline_id is not None
        button = tg.inline_messages[inline_id]["reply_markup"]["inline_keyboard"][0][0]
        assert button["text"] == "Answer here"

        tg.push_inline_callback(FRIEND_OF_NOBODY, button["callback_data"], inline_id)  # a stranger: refused
        await tg.wait_for(lambda: len(tg.calls_to("answerCallbackQuery")) == 1, what="the stranger's refusal")
        assert llm.requests == []

        tg.push_inline_callback(OWNER, button["callback_data"], inline_id)
        await tg.wait_for(lambda: "Blue, mostly." in tg.inline_messages[inline_id]["text"], what="the answer")
        tg.push_inline_callback(OWNER, button["callback_data"], inline_id)  # again: answered already
        await tg.wait_for(lambda: len(tg.calls_to("answerCallbackQuery")) == 3, what="the second press")
        assert "answered already" in tg.calls_to("answerCallbackQuery")[-1].params["text"]
        assert len(llm.requests) == 1


async def test_a_strangers_inline_query_gets_the_refusal(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, guest_mode="on") as h:
        query_id = tg.push_inline_query(STRANGER, "anything")
        (result,) = (await inline_results(h, query_id))["results"]
        assert result["input_message_content"]["message_text"] == USER_REFUSAL.format(user_id=STRANGER)
        assert llm.requests == []


def test_start_up_says_what_botfather_must_turn_on() -> None:
    bot = User(
        1, "Bot", True, username="test_bot", supports_guest_queries=False, supports_inline_queries=False
    )
    line = support_line(bot, enabled=True)
    assert line is not None and "@BotFather" in line and "/setinline" in line
    ready = User(
        1, "Bot", True, username="test_bot", supports_guest_queries=True, supports_inline_queries=True
    )
    assert support_line(ready, enabled=True) is None
    assert support_line(bot, enabled=False) is None  # GUEST_MODE=off: nothing to say


async def test_forget_me_stops_a_guest_answer_and_leaves_nothing_of_it(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(hang(60, partial="Half an answer"))
    async with running_bot(tmp_path, tg, llm, guest_mode="on", memory_extract=False) as h:
        url = h.settings.database_url
        query_id = tg.push_guest_message(FRIEND, "@test_bot a long question", FRIEND_CHAT)
        await guest_answer(h, query_id, "answering")
        await llm.wait_for_requests(1)
        assert rows_naming(url, FRIEND)  # the guest turn's messages, its link
        tg.push_text(FRIEND, "/forget_me")
        await h.final_text(FRIEND, "cannot be undone")
        tg.push_callback(FRIEND, f"forget:yes:{FRIEND}")
        await h.final_text(FRIEND, "Done. I deleted everything")
        inline_id = next(iter(tg.inline_messages))
        await tg.wait_for(lambda: "(stopped)" in tg.inline_messages[inline_id]["text"], what="the stop")
    assert rows_naming(url, FRIEND) == {}
