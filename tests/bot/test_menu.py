"""What Telegram shows about the bot: the command menu of each audience, /help to match, and descriptions
set at start only where the operator set none in BotFather."""

from __future__ import annotations

from pathlib import Path

from bot.texts.catalog import DESCRIPTION, SHORT_DESCRIPTION
from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, running_bot

GROUP = -100777


async def test_each_audience_gets_its_own_command_menu(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, allowed_chat_ids=str(GROUP)):
        owner = tg.commands_for(OWNER, OWNER)
        friend = tg.commands_for(FRIEND, FRIEND)
        group = tg.commands_for(GROUP, FRIEND, group=True)
        group_owner = tg.commands_for(GROUP, OWNER, group=True, admin=True)
    assert {"budget", "memory", "usage", "reminders", "help"} <= set(owner)
    assert "budget" not in friend and {"memory", "usage", "reminders", "start"} <= set(friend)
    assert {"help", "newsession", "stop", "retry", "model", "reminders"} <= set(group)
    # Private things stay out of a group's menu, for everyone there.
    assert not {"memory", "timezone", "usage", "budget", "codefailures", "start"} & set(group + group_owner)
    assert len(owner) == len(set(owner))  # one entry per command
    assert tg.commands_for(5, 5) == friend  # any other private chat: the private list (default scope too)
    assert [c.params["scope"]["type"] for c in tg.calls_to("setMyCommands")].count("chat") == 1


async def test_help_lists_the_commands_of_the_chat_it_is_asked_in(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, allowed_chat_ids=str(GROUP)) as h:
        owner = await h.command(OWNER, "/help", "Commands:")
        friend = await h.command(FRIEND, "/help", "Commands:")
        tg.push_text(FRIEND, "/help", chat_id=GROUP)
        group = await h.final_text(GROUP, "Commands:")
    assert "/budget USER_ID" in owner and "/usage all" in owner
    assert "/budget" not in friend and "/usage all" not in friend and "/memory" in friend
    assert "/memory" not in group and "/budget" not in group and "/reminders" in group
    assert "Ctrl-C" not in owner + friend + group and "/quit" not in owner  # the terminal's own


async def test_descriptions_are_set_when_empty(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    async with running_bot(tmp_path, tg, llm):
        pass
    assert tg.descriptions == {"": DESCRIPTION}
    assert tg.short_descriptions == {"": SHORT_DESCRIPTION}


async def test_descriptions_set_in_botfather_are_left_alone(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    tg.descriptions[""] = "The Smith family's helper."
    tg.short_descriptions[""] = "Ask me anything."
    async with running_bot(tmp_path, tg, llm):
        pass
    assert tg.descriptions == {"": "The Smith family's helper."}
    assert tg.short_descriptions == {"": "Ask me anything."}
    assert not tg.calls_to("setMyDescription") and not tg.calls_to("setMyShortDescription")
    assert tg.calls_to("getMyDescription") and tg.calls_to("getMyShortDescription")


async def test_a_failing_menu_request_is_logged_and_the_rest_still_happens(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    tg.fail_when("setMyCommands", lambda p: p["scope"]["type"] == "all_group_chats", error="server_error")
    tg.fail_next("getMyDescription", error="bad_gateway")
    async with running_bot(tmp_path, tg, llm) as h:
        await h.command(OWNER, "/help", "Commands:")  # the bot serves
    assert "budget" in tg.commands_for(OWNER, OWNER) and tg.commands_for(FRIEND, FRIEND)
    assert tg.short_descriptions == {"": SHORT_DESCRIPTION} and tg.descriptions == {}
