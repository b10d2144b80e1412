"""Sessions per user and chat: a group turn never sees the private conversation, memories or summaries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.runtime.services import Services
from tests.support.fakes.openai_api import FakeLLM, Step, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, running_bot

GROUP = -100555  # a supergroup id, as Telegram gives them
PIN = "4921"


def tool_names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools", [])]


async def test_a_group_turn_sees_nothing_of_the_private_chat(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    def group_answer(request: dict[str, Any]) -> Step:
        return text("Hello group.")

    llm.script(
        text("Noted."),  # private: "my PIN is 4921"
        tool_calls(call("memory", {"action": "recall", "query": "PIN"}, id="mem1")),  # group: tries memory
        group_answer,
        text("Your PIN is 4921."),  # private again: continuity
    )
    async with running_bot(tmp_path, tg, llm, stream_edit_interval_s=0, allowed_chat_ids=str(GROUP)) as h:
        # A private long-term memory that would be relevant to the group question.
        await h.services.memory.store(OWNER, "long", f"The user's bank PIN is {PIN}", category="fact")
        tg.push_text(OWNER, f"my PIN is {PIN}")
        await h.final_text(OWNER, "Noted.")

        tg.push_text(OWNER, "@test_bot what is my PIN?", chat_id=GROUP)
        await h.final_text(GROUP, "Hello group.")
        group_requests = llm.requests[1:3]
        for request in group_requests:
            dumped = json.dumps(request, ensure_ascii=False)
            assert PIN not in dumped and "Noted." not in dumped
            assert "memory" not in tool_names(request)  # memories are private: not offered in a group
        first = group_requests[0]["messages"]
        assert [m["content"] for m in first[1:]] == [
            "[Ann in the group:] what is my PIN?"
        ]  # the speaker is named
        # The model called memory anyway: it got a clear refusal, not the user's memories.
        refusal = group_requests[1]["messages"][-1]
        assert refusal["role"] == "tool" and refusal["tool_call_id"] == "mem1"
        assert "not available in group chats" in refusal["content"]
        assert PIN not in "\n".join(tg.sent_texts(GROUP))

        # The private chat goes on where it was, without the group's messages.
        tg.push_text(OWNER, "and what was it again?")
        await h.final_text(OWNER, "Your PIN is 4921.")
        private = llm.requests[3]["messages"]
        assert [(m["role"], m["content"]) for m in private[1:]] == [
            ("user", f"my PIN is {PIN}"),
            ("assistant", "Noted."),
            ("user", "and what was it again?"),
        ]
        assert PIN in private[0]["content"]  # the private memory still reaches the private prompt
        assert "memory" in tool_names(llm.requests[3])


async def test_newsession_and_summaries_stay_in_their_chat(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(
        text("Noted."),  # private turn
        text(f"- The user's PIN is {PIN}."),  # summary of the private session (/newsession in private)
        text("Hi all."),  # group turn
        text("- Group said hi."),  # summary of the group session (/newsession in the group)
        text("Fresh group."),  # group turn in the new group session
        text("Fresh private."),  # private turn in the new private session
    )
    async with running_bot(tmp_path, tg, llm, stream_edit_interval_s=0, allowed_chat_ids=str(GROUP)) as h:
        tg.push_text(OWNER, f"my PIN is {PIN}")
        await h.final_text(OWNER, "Noted.")
        tg.push_text(OWNER, "/newsession")
        await h.final_text(OWNER, "Started a new session")

        tg.push_text(OWNER, "@test_bot hello everyone", chat_id=GROUP)
        await h.final_text(GROUP, "Hi all.")
        group_turn = json.dumps(llm.requests[2], ensure_ascii=False)
        assert PIN not in group_turn and "Summary of the previous session" not in group_turn

        tg.push_text(OWNER, "/newsession", chat_id=GROUP)
        await h.final_text(GROUP, "Started a new session")
        tg.push_text(OWNER, "@test_bot again", chat_id=GROUP)
        await h.final_text(GROUP, "Fresh group.")
        group_system = llm.requests[4]["messages"][0]["content"]
        assert "Group said hi." in group_system and PIN not in group_system  # the group's own summary only
        # The group's summary is not made a memory of the user's (private) memories; the private one is.
        memories = " ".join(m["content"] for m in await h.services.memory.list_memories(OWNER))
        assert PIN in memories and "Group said hi." not in memories

        tg.push_text(OWNER, "anything new?")
        await h.final_text(OWNER, "Fresh private.")
        private_system = llm.requests[5]["messages"][0]["content"]
        assert PIN in private_system and "Group said hi." not in private_system


async def test_memory_command_and_restart_notice_stay_in_their_chat(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    def cut_group_turn(services: Services) -> None:
        # A group message whose turn a restart cut short.
        session = services.conversations.current_session(OWNER, GROUP, chat_type="supergroup")
        services.conversations.add_message(
            session.id, OWNER, GROUP, "user", "group question", status="pending"
        )

    async with running_bot(tmp_path, tg, llm, setup=cut_group_turn, allowed_chat_ids=str(GROUP)) as h:
        notice = await h.final_text(GROUP, "I was restarted while answering")
        assert "group question" in notice and tg.sent_texts(OWNER) == []
        await h.services.memory.store(OWNER, "long", f"The user's bank PIN is {PIN}", category="fact")
        tg.push_text(OWNER, "/memory", chat_id=GROUP)
        await h.final_text(GROUP, "Your memories are private")
        tg.push_text(OWNER, "/memory search PIN", chat_id=GROUP)
        await tg.wait_for(lambda: len(tg.sent_texts(GROUP)) == 3, what="the second refusal")
        assert PIN not in "\n".join(tg.sent_texts(GROUP))
        await h.command(OWNER, "/memory", PIN)  # in private the list is shown
