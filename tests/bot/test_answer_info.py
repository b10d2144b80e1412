"""The ⓘ button under an answer ("why this answer"), through the whole stack: the memories recalled into
the turn (with a Forget button each), the tools it called, the model, tokens and cost; only the asker sees
it; groups have no button unless ANSWER_INFO_BUTTON=all; the record goes with the turn's messages."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import delete, select

from core_tools.usage.amounts import fine_usd, tokens_str
from db.models import LLMCall, Message, TurnInfo
from tests.support.databases import both_databases
from tests.support.fakes.openai_api import FakeLLM, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram, JsonDict
from tests.support.harness import FRIEND, OWNER, STRANGER, Harness, register_math, rows, running_bot

db_kind = both_databases()  # the record's cascade with the turn's messages is each database's own
pytestmark = pytest.mark.usefixtures("bot_database")

GROUP = -100444
# USD per million tokens: large, so the cost of a few hundred tokens reads as more than $0.
PRICES = json.dumps({"fake-model": [1000, 3000]})


def _buttons(msg: JsonDict) -> list[dict[str, Any]]:
    markup = msg.get("reply_markup") or {}
    return [b for row in markup.get("inline_keyboard", []) for b in row]


async def answer_with_info(tg: FakeTelegram, chat: int, contains: str) -> tuple[JsonDict, str]:
    """Wait for the final answer carrying the ⓘ button; the message and the button's callback data."""

    def found() -> tuple[JsonDict, str] | None:
        for m in tg.messages.get(chat, []):
            data = [b["callback_data"] for b in _buttons(m) if b.get("text") == "ⓘ"]
            if contains in str(m.get("text")) and data:
                return m, str(data[0])
        return None

    result: tuple[JsonDict, str] = await tg.wait_for(found, what=f"the answer {contains!r} with its ⓘ")
    return result


async def finished_answer(tg: FakeTelegram, chat: int, contains: str) -> JsonDict:
    """Wait for the final answer (its preview's Stop button gone)."""

    def found() -> JsonDict | None:
        return next(
            (
                m
                for m in tg.messages.get(chat, [])
                if contains in str(m.get("text")) and not any(b.get("text") == "Stop" for b in _buttons(m))
            ),
            None,
        )

    result: JsonDict = await tg.wait_for(found, what=f"the final answer {contains!r}")
    return result


async def note(tg: FakeTelegram, chat: int, *, after: int = 0) -> JsonDict:
    """Wait for a "why this answer" note in the chat (the `after`-th one and later)."""

    def found() -> JsonDict | None:
        notes = [m for m in tg.messages.get(chat, []) if str(m.get("text")).startswith("Why this answer")]
        return notes[after] if len(notes) > after else None

    result: JsonDict = await tg.wait_for(found, what="the 'why this answer' note")
    return result


async def callback_answer(tg: FakeTelegram, contains: str) -> str:
    """Wait for a button press's answer (the little notice or alert) that contains `contains`."""

    def found() -> str | None:
        texts = [str(c.params.get("text")) for c in tg.calls_to("answerCallbackQuery")]
        return next((t for t in texts if contains in t), None)

    result: str = await tg.wait_for(found, what=f"a button answer containing {contains!r}")
    return result


def turn_spend(h: Harness) -> tuple[int, int, int]:
    """(requests, prompt tokens, completion tokens) of the chat turn's LLM calls."""
    calls = [r for r in rows(h, LLMCall) if r["purpose"] in ("chat", "final")]
    return len(calls), sum(r["prompt_tokens"] for r in calls), sum(r["completion_tokens"] for r in calls)


async def test_info_shows_memories_tools_model_tokens_and_cost_and_forgets_a_memory(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(tool_calls(call("add", {"a": 2, "b": 3})), text("Mia starts in September; 2+3 is 5."))
    async with running_bot(tmp_path, tg, llm, setup=register_math, llm_prices=PRICES) as h:
        await h.services.memory.store(
            OWNER, "long", "My daughter Mia starts school in September", category="fact"
        )
        tg.push_text(OWNER, "when does my kid begin classes? and add 2 and 3")
        answer, data = await answer_with_info(tg, OWNER, "2+3 is 5")
        assert len(data.encode()) < 64
        tg.push_callback(OWNER, data, message_id=answer["message_id"])
        shown = await note(tg, OWNER)
        body = str(shown["text"])
        sent = [c for c in tg.calls_to("sendMessage") if str(c.params.get("text")).startswith("Why this")]
        assert sent[0].params["reply_parameters"]["message_id"] == answer["message_id"]  # a reply to it
        assert "2+3 is 5" in str(answer["text"]) and _buttons(answer)  # the answer stays as it was
        assert "Mia starts school in September" in body
        assert 'add {"a": 2, "b": 3}' in body
        requests, prompt, completion = turn_spend(h)
        assert requests == 2 and prompt > 0 and completion > 0
        assert "Model: fake-model · 2 LLM requests" in body
        assert f"Tokens: {tokens_str(prompt)} in, {tokens_str(completion)} out" in body
        assert f"Cost: {fine_usd((prompt * 1000 + completion * 3000) / 1e6)}" in body

        forget = [b["callback_data"] for b in _buttons(shown) if b["text"] == "Forget 1"]
        assert forget and len(forget[0].encode()) < 64
        tg.push_callback(OWNER, forget[0], message_id=shown["message_id"])
        await callback_answer(tg, "Forgotten.")
        await tg.wait_for(
            lambda: "(forgotten)" in str(shown.get("text")) and not _buttons(shown),
            what="the note showing the memory forgotten, without its button",
        )
        assert await h.services.memory.list_memories(OWNER) == []
        await h.command(OWNER, "/memory", "I have no memories about you yet.")


async def test_info_lists_memories_the_memory_tool_recalled(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    recall = {"action": "recall", "query": "parcel delivery", "layer": "short"}
    llm.script(tool_calls(call("memory", recall)), text("Your parcel comes on Friday."))
    async with running_bot(tmp_path, tg, llm) as h:
        # Short-term memories are not put into the prompt: only the tool's recall brings this one in.
        await h.services.memory.store(OWNER, "short", "The parcel from Lisbon arrives on Friday")
        tg.push_text(OWNER, "when does my parcel come?")
        answer, data = await answer_with_info(tg, OWNER, "comes on Friday")
        assert "parcel from Lisbon" not in llm.requests[0]["messages"][0]["content"]
        tg.push_callback(OWNER, data, message_id=answer["message_id"])
        body = str((await note(tg, OWNER))["text"])
        assert "1. The parcel from Lisbon arrives on Friday" in body
        assert '• memory {"action": "recall"' in body


async def test_groups_have_no_button_by_default_and_only_the_asker_sees_the_info(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("Hello group."), text("Hello again."))
    async with running_bot(tmp_path, tg, llm, allowed_chat_ids=str(GROUP)):
        tg.push_text(FRIEND, "@test_bot hi", chat_id=GROUP, first_name="Bob")
        answer = await finished_answer(tg, GROUP, "Hello group.")
        assert _buttons(answer) == []

    async with running_bot(tmp_path / "all", tg, llm, allowed_chat_ids=str(GROUP), answer_info_button="all"):
        tg.push_text(FRIEND, "@test_bot hi again", chat_id=GROUP, first_name="Bob")
        answer, data = await answer_with_info(tg, GROUP, "Hello again.")
        tg.push_callback(STRANGER, data, message_id=answer["message_id"], chat_id=GROUP)
        assert await callback_answer(tg, "can see this") == "Only Bob can see this."
        tg.push_callback(FRIEND, data, message_id=answer["message_id"], chat_id=GROUP)
        shown = await note(tg, GROUP)
        # Exactly one note: the stranger's press showed nothing.
        texts = tg.sent_texts(GROUP)
        assert sum(t.startswith("Why this answer") for t in texts) == 1
        assert "No memories were recalled into it." in str(shown["text"])


async def test_the_setting_off_hides_the_button(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    llm.script(text("No button here."))
    async with running_bot(tmp_path, tg, llm, answer_info_button="off"):
        tg.push_text(OWNER, "hello")
        answer = await finished_answer(tg, OWNER, "No button here.")
        assert _buttons(answer) == []


async def test_the_record_goes_with_the_turns_messages(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("Kept for now."))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "hello")
        answer, data = await answer_with_info(tg, OWNER, "Kept for now.")
        records = rows(h, TurnInfo)
        assert len(records) == 1 and records[0]["api_calls"] == 1
        with h.services.engine.begin() as conn:
            session = conn.execute(
                select(Message.session_id).where(Message.id == records[0]["answer_id"])
            ).scalar_one()
            conn.execute(delete(Message).where(Message.session_id == session))
        assert rows(h, TurnInfo) == []
        tg.push_callback(OWNER, data, message_id=answer["message_id"])
        assert "are gone" in await callback_answer(tg, "are gone")
        assert not any(t.startswith("Why this answer") for t in tg.sent_texts(OWNER))
