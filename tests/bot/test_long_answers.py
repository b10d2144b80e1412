"""An answer is never lost to Telegram's "message is too long": it is split and resent, not apologised for."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from telegram import Bot
from telegram.error import BadRequest

from bot.adapter.render import render
from db.models import Message
from tests.support.fakes.openai_api import FakeLLM, TextStep, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram, utf16_len
from tests.support.fakes.telegram_api import TelegramError as ApiError
from tests.support.harness import OWNER, TOKEN, register_math, rows, running_bot

APOLOGY = "something went wrong"
TOO_LONG = "Bad Request: message is too long"


def squeeze(value: str) -> str:
    """The text without whitespace: splitting may drop the newline (or space) it cut at."""
    return re.sub(r"\s+", "", value)


async def test_fake_counts_utf16_units_after_parse_mode_like_telegram(tg: FakeTelegram) -> None:
    async with Bot(TOKEN, base_url=tg.base_url) as bot:
        with pytest.raises(BadRequest, match=r"(?i)message is too long"):
            await bot.send_message(OWNER, "😀" * 2049)  # 2,049 characters, 4,098 UTF-16 units
        assert tg.calls_to("sendMessage")[-1].error == TOO_LONG
        # 5,000 characters of HTML that show 1,000: accepted, as Telegram counts after parsing
        assert (await bot.send_message(OWNER, "&amp;" * 1000, parse_mode="HTML")).text
        with pytest.raises(BadRequest, match=r"(?i)message is too long"):
            await bot.send_message(OWNER, "<b>" + "😀" * 2049 + "</b>", parse_mode="HTML")
        assert tg.calls_to("sendMessage")[-1].error == TOO_LONG
        with pytest.raises(BadRequest, match=r"(?i)message is too long"):
            await bot.send_message(OWNER, "\\." * 4097, parse_mode="MarkdownV2")
        assert tg.calls_to("sendMessage")[-1].error == TOO_LONG


async def test_three_thousand_emoji_arrive_whole_in_several_messages(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    answer = "😀" * 3000
    llm.script(text(answer, chunk_size=500))
    async with running_bot(tmp_path, tg, llm):
        tg.push_text(OWNER, "emoji please")
        await tg.wait_for(lambda: squeeze("".join(tg.sent_texts(OWNER))) == answer, what="the whole answer")
        sent = tg.sent_texts(OWNER)
        assert len(sent) >= 2 and all(utf16_len(t) <= 4096 for t in sent)
        assert not any(APOLOGY in t for t in sent)


async def test_answer_refused_as_too_long_is_split_and_resent(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    # A Bot API that counts the text longer than we do (its own rules for some characters): every send or
    # edit over 1,500 of our units is refused with Telegram's exact error.
    def over(p: dict[str, object]) -> bool:
        return utf16_len(str(p.get("text", ""))) > 1500

    tg.fail_when("sendMessage", over, error="message_too_long")
    tg.fail_when("editMessageText", over, error="message_too_long")
    answer = "\n".join(f"Step {i}: **mix** the `part {i}` & stir 😀 for {i} minutes." for i in range(90))
    llm.script(text(answer, chunk_size=200))
    expected = squeeze("".join(part.text for part in render(answer)))
    async with running_bot(tmp_path, tg, llm):
        tg.push_text(OWNER, "a long recipe")
        await tg.wait_for(
            lambda: squeeze("".join(tg.sent_texts(OWNER))) == expected, what="the whole answer", timeout=60
        )
        sent = tg.sent_texts(OWNER)
        assert len(sent) >= 3 and not any(APOLOGY in t for t in sent)
        assert any(c.error == TOO_LONG for c in tg.calls)  # the refusal really happened
        bold = [e for m in tg.messages[OWNER] for e in m.get("entities", []) if e["type"] == "bold"]
        assert len(bold) == 90  # formatting kept across the pieces


@pytest.mark.parametrize("edit_error", [TOO_LONG, "Bad Request: message can't be edited"])
async def test_answer_arrives_whole_and_stored_whatever_the_bot_api_refuses(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, edit_error: str
) -> None:
    """A Bot API that counts texts longer than the bot does (it refuses anything over 1,000 units), refuses
    every formatting entity, and refuses to edit the streamed preview: the answer still arrives whole, as
    plain text in pieces, where the preview was; and it is stored."""
    tg.message_limit = 1000
    for method in ("sendMessage", "editMessageText"):
        tg.fail_when(method, lambda p: bool(p.get("entities")), error="cant_parse")
    answer = "\n".join(f"Step {i}: **mix** the `part {i}` & stir 😀 for {i} minutes." for i in range(60))

    async def after_the_preview(request: dict[str, object]) -> TextStep:
        # The answer comes once the chat shows a preview (the tool round's status): the final text must
        # replace a preview, whose edits the Bot API now refuses.
        await tg.wait_for(lambda: tg.sent_texts(OWNER), what="the preview")
        tg.fail_when("editMessageText", lambda p: True, error=ApiError(400, edit_error))
        return text(answer, chunk_size=400)

    llm.script(
        tool_calls(call("add", {"a": 2, "b": 3}), content="Let me count the steps."), after_the_preview
    )
    expected = squeeze("".join(part.text for part in render(answer)))
    async with running_bot(tmp_path, tg, llm, setup=register_math) as h:
        tg.push_text(OWNER, "a long recipe")
        await tg.wait_for(
            lambda: squeeze("".join(tg.sent_texts(OWNER))) == expected,
            what="the whole answer, and only it",
            timeout=30,
        )
        sent = tg.sent_texts(OWNER)
        assert len(sent) >= 4 and all(utf16_len(t) <= 1000 for t in sent)
        assert not any(APOLOGY in t for t in sent)
        assert any(c.error == TOO_LONG for c in tg.calls_to("sendMessage"))  # it really split further
        assert any(not c.ok for c in tg.calls_to("editMessageText"))  # and the preview's edit was refused
        stored = [m for m in rows(h, Message) if m["role"] == "assistant"]
        assert stored[-1]["content"] == answer and stored[-1]["status"] == "done"


async def test_a_part_refused_in_every_form_does_not_take_the_rest_with_it(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    tg.fail_when(
        "sendMessage",
        lambda p: "Step 100:" in str(p.get("text")),
        error=ApiError(400, "Bad Request: TEXT_INVALID"),
    )
    answer = "\n".join(f"Step {i}: **mix** the `part {i}` & stir 😀 for {i} minutes." for i in range(200))
    llm.script(text(answer, chunk_size=2000))
    parts = [p.text for p in render(answer)]
    assert len(parts) >= 3
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "a very long recipe")
        note = await h.final_text(OWNER, "Telegram refused 1 of the", timeout=30)
        assert "text_invalid" in note.lower() and "saved" in note
        sent = tg.sent_texts(OWNER)
        assert [t for t in sent if t != note] == [p for p in parts if "Step 100:" not in p]
        assert not any(APOLOGY in t for t in sent)
