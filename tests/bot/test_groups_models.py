"""Groups (listed chats, mentions, shared group sessions), /model, and who may stop, retry or switch."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from core_tools.sessions import SessionManager
from tests.bot.test_stop import slow_text, streaming_preview
from tests.support.fakes.openai_api import FakeLLM, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, STRANGER, running_bot

GROUP = -100777
OTHER_GROUP = -100888


def users_said(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


async def test_a_group_is_answered_only_when_addressed_and_shares_one_session(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(
        text("Private noted."),
        text("Hi group."),
        text("Reply seen."),
        text("- Ann and Bob said hello."),  # the group session's summary (/newsession there)
        text("Bye both."),
    )
    async with running_bot(tmp_path, tg, llm, allowed_chat_ids=str(GROUP)) as h:
        tg.push_text(FRIEND, "my secret plan is X-17", first_name="Bob")  # private chat
        await h.final_text(FRIEND, "Private noted.")
        tg.push_text(OWNER, "just chatting among us", chat_id=GROUP)  # not for the bot: silence
        tg.push_text(OWNER, "@test_bot hello", chat_id=GROUP)
        await h.final_text(GROUP, "Hi group.")
        assert len(llm.requests) == 2 and tg.sent_texts(GROUP) == ["Hi group."]
        assert users_said(llm.requests[1]) == ["[Ann in the group:] hello"]  # the speaker, without @name

        # A reply to the bot's message needs no mention.
        tg.push_text(FRIEND, "really?", chat_id=GROUP, first_name="Bob", reply_to=tg.last_message(GROUP))
        await h.final_text(GROUP, "Reply seen.")
        said = users_said(llm.requests[2])
        # One session for the group, whoever speaks; never the speaker's private conversation.
        assert said[0] == "[Ann in the group:] hello" and said[1].startswith("[Bob in the group:] [The user")
        assert "X-17" not in json.dumps(llm.requests[2])

        # Either member ends the group's session; the next group turn starts from its summary.
        tg.push_text(FRIEND, "/newsession@test_bot", chat_id=GROUP, first_name="Bob")
        await h.final_text(GROUP, "Started a new session")
        tg.push_text(OWNER, "@test_bot bye", chat_id=GROUP)
        await h.final_text(GROUP, "Bye both.")
        assert users_said(llm.requests[4]) == ["[Ann in the group:] bye"]
        system = llm.requests[4]["messages"][0]["content"]
        assert "Ann and Bob said hello." in system and "X-17" not in system


async def test_unlisted_groups_are_refused_with_their_id_or_served_for_allowed_speakers(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, allowed_chat_ids=str(GROUP)) as h:
        tg.push_text(OWNER, "talking", chat_id=OTHER_GROUP)
        tg.push_text(OWNER, "@test_bot are you here?", chat_id=OTHER_GROUP)
        refusal = await h.final_text(OTHER_GROUP, "not on my list of chats")
        assert str(OTHER_GROUP) in refusal and "ALLOWED_CHAT_IDS" in refusal
        assert tg.sent_texts(OTHER_GROUP) == [refusal] and llm.requests == []

    llm.script(text("Served."))
    async with running_bot(tmp_path / "speakers", tg, llm, groups_allowed_speakers=True) as h:
        tg.push_text(STRANGER, "@test_bot me too", chat_id=OTHER_GROUP, first_name="Eve")
        await h.final_text(OTHER_GROUP, f"Your Telegram user id is {STRANGER}")
        tg.push_text(FRIEND, "@test_bot hi", chat_id=OTHER_GROUP, first_name="Bob")
        await h.final_text(OTHER_GROUP, "Served.")
        assert len(llm.requests) == 1


async def test_only_the_asker_or_the_owner_stops_or_retries(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(slow_text(), slow_text(), text("Retried."))
    async with running_bot(tmp_path, tg, llm, allowed_chat_ids=str(GROUP)) as h:
        tg.push_text(FRIEND, "@test_bot write a lot", chat_id=GROUP, first_name="Bob")
        preview = await streaming_preview(tg, GROUP)
        data = preview["reply_markup"]["inline_keyboard"][0][0]["callback_data"]  # type: ignore[index]
        # A group member who is not the asker nor the owner: refused by command and by button.
        tg.push_text(STRANGER, "/stop", chat_id=GROUP, first_name="Eve")
        await h.final_text(GROUP, "Only the person who asked, or the bot's owner, can stop this.")
        tg.push_callback(STRANGER, data, chat_id=GROUP)
        await tg.wait_for(
            lambda: any(
                "can stop this" in str(c.params.get("text")) for c in tg.calls_to("answerCallbackQuery")
            ),
            what="the refused button press",
        )
        assert not any("(stopped)" in t for t in tg.sent_texts(GROUP))
        tg.push_text(FRIEND, "/stop", chat_id=GROUP, first_name="Bob")  # the asker can
        await h.final_text(GROUP, "(stopped)")

        tg.push_text(FRIEND, "@test_bot again", chat_id=GROUP, first_name="Bob")
        await streaming_preview(tg, GROUP)
        tg.push_text(OWNER, "/stop", chat_id=GROUP)  # the owner can stop anyone's turn
        await tg.wait_for(
            lambda: sum("(stopped)" in t for t in tg.sent_texts(GROUP)) == 2, what="second stop"
        )

        tg.push_text(STRANGER, "/retry", chat_id=GROUP, first_name="Eve")
        await h.final_text(GROUP, "can retry this")
        tg.push_text(FRIEND, "/retry", chat_id=GROUP, first_name="Bob")
        await h.final_text(GROUP, "Retried.")
        assert users_said(llm.requests[-1])[-1] == "[Bob in the group:] again"

        # A stranger's button press in a private chat is refused before anything runs.
        tg.push_callback(STRANGER, "stop:1")
        await tg.wait_for(
            lambda: any("not on this bot's list" in str(c.params.get("text")) for c in tg.calls),
            what="the refused press",
        )


async def test_model_switches_the_chat_model_with_prices_and_usage_per_model(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("From the default."), text("From the big one."), text("Friend default."))
    prices = json.dumps({"fake-model": [0.1, 0.4], "big-model": [5, 15]})
    async with running_bot(
        tmp_path,
        tg,
        llm,
        llm_models="fake-model,big-model",
        llm_prices=prices,
        llm_summary_model="small-model",
        allowed_chat_ids=str(GROUP),
    ) as h:
        tg.push_text(OWNER, "hello")
        await h.final_text(OWNER, "From the default.")
        menu = await h.command(OWNER, "/model", "Model of this chat: fake-model")
        assert "$0.1 in / $0.4 out per 1M tokens" in menu
        buttons = tg.last_message(OWNER)["reply_markup"]["inline_keyboard"]
        assert [b[0]["text"] for b in buttons] == [
            "✓ fake-model · $0.1 in / $0.4 out per 1M tokens",
            "big-model · $5 in / $15 out per 1M tokens",
        ]
        tg.push_callback(OWNER, buttons[1][0]["callback_data"])
        await h.final_text(OWNER, "Model of this chat: big-model")
        tg.push_text(OWNER, "and now?")
        await h.final_text(OWNER, "From the big one.")
        assert [r["model"] for r in llm.requests] == ["fake-model", "big-model"]
        tg.push_text(FRIEND, "hi")  # another chat keeps the default
        await h.final_text(FRIEND, "Friend default.")
        assert llm.requests[-1]["model"] == "fake-model"

        usage = await h.command(OWNER, "/usage", "Usage today")
        assert "By model:" in usage and "  big-model: 1 call" in usage and "  fake-model: 1 call" in usage

        # Session summaries use LLM_SUMMARY_MODEL.
        llm.script(text("- said hello"))
        await h.command(OWNER, "/newsession", "Started a new session")
        assert llm.requests[-1]["model"] == "small-model"

        # In a group only allowed users and the owner may change the model.
        tg.push_text(OWNER, "/model", chat_id=GROUP)
        await h.final_text(GROUP, "Model of this chat")
        group_buttons = tg.last_message(GROUP)["reply_markup"]["inline_keyboard"]
        tg.push_callback(STRANGER, group_buttons[1][0]["callback_data"], chat_id=GROUP)
        await tg.wait_for(
            lambda: any("can change the model" in str(c.params.get("text")) for c in tg.calls),
            what="the refused model change",
        )
        assert h.services.conversations.chat_model(GROUP) is None


async def test_the_rollover_ends_a_group_session_once_for_everyone_in_it(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, allowed_chat_ids=str(GROUP)) as h:
        conv = h.services.conversations
        shared = conv.current_session(OWNER, GROUP, chat_type="supergroup")
        assert conv.current_session(FRIEND, GROUP).id == shared.id  # one session per group
        conv.add_message(shared.id, FRIEND, GROUP, "user", "[Bob in the group:] hi")
        later = datetime.now(UTC) + timedelta(days=2)
        manager = SessionManager(conv, None, None, clock=lambda: later)
        (done,) = await manager.rollover_due()
        assert done.old is not None and done.old.id == shared.id
        fresh = conv.current_session(FRIEND, GROUP)
        assert fresh.id == done.new.id == conv.current_session(OWNER, GROUP).id
        assert fresh.chat_type == "supergroup"
