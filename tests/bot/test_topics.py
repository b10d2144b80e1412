"""Forum topics: each topic of a forum supergroup is a conversation of its own, answered in its topic.

The fake Bot API refuses a `message_thread_id` that is not a topic of a forum (as Telegram does, General's
too), so every test here also shows the bot never sends one where it does not belong.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.bot.test_stop import slow_text
from tests.support.fakes.openai_api import FakeLLM, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, running_bot
from tests.support.media_files import make_wav
from tests.support.schedules import local_at, wait_sent

FORUM = -100555
GROUP = -100777


def users_said(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


def sends(tg: FakeTelegram, chat: int) -> list[Any]:
    """Every call the bot made to the chat (sends, edits, chat actions, files)."""
    return [c for c in tg.calls if c.params.get("chat_id") == chat]


async def test_two_topics_are_two_conversations_each_answered_in_its_own_topic(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    # Telegram makes each message of a topic a reply to the topic's creation message: one the bot made must
    # not make every message there a reply to the bot.
    trips = tg.create_topic(FORUM, "Trips", by=tg.bot_user["id"])
    books = tg.create_topic(FORUM, "Books")
    llm.script(
        text("Rome it is."),
        text("Try Dune."),
        text("Milan too."),
        text("- Ann asked for a novel."),  # the Books session's summary (/newsession there)
        text("Try Emma."),
        text("Hello everyone."),
    )
    async with running_bot(tmp_path, tg, llm, allowed_chat_ids=str(FORUM), typing_delay_s=0):
        tg.push_text(OWNER, "just chatting among us", chat_id=FORUM, thread_id=trips)  # not for the bot
        tg.push_text(OWNER, "@test_bot plan a trip to Rome", chat_id=FORUM, thread_id=trips)
        await tg.wait_for(lambda: tg.topic_texts(FORUM, trips) == ["Rome it is."], what="the Trips answer")
        assert users_said(llm.requests[0]) == ["[Ann in the group:] plan a trip to Rome"]  # no quote either
        tg.push_text(FRIEND, "@test_bot suggest a novel", chat_id=FORUM, thread_id=books, first_name="Bob")
        await tg.wait_for(lambda: tg.topic_texts(FORUM, books) == ["Try Dune."], what="the Books answer")
        # The Books topic's request holds nothing of the Trips topic.
        assert users_said(llm.requests[1]) == ["[Bob in the group:] suggest a novel"]
        assert "Rome" not in json.dumps(llm.requests[1])

        tg.push_text(OWNER, "@test_bot and Milan?", chat_id=FORUM, thread_id=trips)
        await tg.wait_for(
            lambda: "Milan too." in tg.topic_texts(FORUM, trips), what="the second Trips answer"
        )
        assert users_said(llm.requests[2]) == [
            "[Ann in the group:] plan a trip to Rome",
            "[Ann in the group:] and Milan?",
        ]
        assert "novel" not in json.dumps(llm.requests[2])

        # /newsession in Books ends the Books session only.
        tg.push_text(FRIEND, "/newsession@test_bot", chat_id=FORUM, thread_id=books, first_name="Bob")
        await tg.wait_for(
            lambda: any("Started a new session" in t for t in tg.topic_texts(FORUM, books)),
            what="/newsession answered in Books",
        )
        tg.push_text(FRIEND, "@test_bot another one?", chat_id=FORUM, thread_id=books, first_name="Bob")
        await tg.wait_for(lambda: "Try Emma." in tg.topic_texts(FORUM, books), what="the new Books answer")
        assert users_said(llm.requests[4]) == ["[Bob in the group:] another one?"]
        assert "Ann asked for a novel." in llm.requests[4]["messages"][0]["content"]  # its own summary

        # The General topic (no thread) is the forum itself: a conversation of its own too.
        tg.push_text(OWNER, "@test_bot hello all", chat_id=FORUM)
        await tg.wait_for(
            lambda: tg.topic_texts(FORUM, None) == ["Hello everyone."], what="the General answer"
        )
        assert users_said(llm.requests[5]) == ["[Ann in the group:] hello all"]

        # Trips kept its session through all of it.
        trips_texts = tg.topic_texts(FORUM, trips)
        assert trips_texts == ["Rome it is.", "Milan too."]
        assert not any("session" in t for t in trips_texts)
        calls = sends(tg, FORUM)
        assert all(c.ok for c in calls), tg.describe_calls()
        # Typing shows in the topic that is being answered, never with General's thread id.
        actions = [c.params.get("message_thread_id") for c in calls if c.method == "sendChatAction"]
        assert set(actions) <= {trips, books, None} and trips in actions


async def test_stop_retry_and_the_queue_stay_in_their_topic(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    trips = tg.create_topic(FORUM, "Trips")
    books = tg.create_topic(FORUM, "Books")
    llm.script(slow_text(), text("Try Dune."), text("Dune again."))
    async with running_bot(tmp_path, tg, llm, allowed_chat_ids=str(FORUM)) as h:
        tg.push_text(OWNER, "@test_bot write a long travel guide", chat_id=FORUM, thread_id=trips)
        await tg.wait_for(
            lambda: any("word" in t for t in tg.topic_texts(FORUM, trips)), what="the Trips answer streaming"
        )
        # Books is not held up by the turn running in Trips, and /stop there finds nothing to stop.
        tg.push_text(OWNER, "@test_bot suggest a novel", chat_id=FORUM, thread_id=books)
        await tg.wait_for(
            lambda: "Try Dune." in tg.topic_texts(FORUM, books), what="Books answered meanwhile"
        )
        tg.push_text(OWNER, "/stop@test_bot", chat_id=FORUM, thread_id=books)
        await tg.wait_for(
            lambda: any("Nothing is running" in t for t in tg.topic_texts(FORUM, books)),
            what="/stop in Books",
        )
        assert any("word" in t and "(stopped)" not in t for t in tg.topic_texts(FORUM, trips))
        # /stop in Trips stops the Trips turn.
        tg.push_text(OWNER, "/stop@test_bot", chat_id=FORUM, thread_id=trips)
        await tg.wait_for(
            lambda: any("(stopped)" in t for t in tg.topic_texts(FORUM, trips)), what="the Trips turn stopped"
        )
        # /retry in Books answers the Books question again, in Books.
        tg.push_text(OWNER, "/retry@test_bot", chat_id=FORUM, thread_id=books)
        await tg.wait_for(lambda: "Dune again." in tg.topic_texts(FORUM, books), what="the retried answer")
        assert users_said(llm.requests[-1]) == ["[Ann in the group:] suggest a novel"]
        assert h.services.conversations.inbox.waiting() == []
        assert all(c.ok for c in sends(tg, FORUM)), tg.describe_calls()


@pytest.mark.slow
async def test_files_reminders_and_voice_answers_of_a_topic_go_to_that_topic(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    trips = tg.create_topic(FORUM, "Trips")
    tg.create_topic(FORUM, "Books")
    program = "open('out/route.txt', 'w').write('Rome -> Milan')\nprint('written')"
    llm.transcript = "what is the weather"
    llm.script(
        tool_calls(call("code", {"action": "execute", "code": program})),
        text("Here is the route."),
    )
    async with running_bot(tmp_path, tg, llm, allowed_chat_ids=str(FORUM), tts_model="tts-1") as h:
        tg.push_text(OWNER, "@test_bot write the route to a file", chat_id=FORUM, thread_id=trips)
        await tg.wait_for(
            lambda: "Here is the route." in tg.topic_texts(FORUM, trips), what="the code answer"
        )
        (document,) = [c for c in sends(tg, FORUM) if c.method == "sendDocument"]
        assert document.ok and document.params.get("message_thread_id") == trips

        llm.script(
            # An hour ahead, and the service's clock moved on below: a slow turn cannot put it in the past.
            tool_calls(call("schedule", {"action": "create", "text": "Pack the bags", "at": local_at(3600)})),
            text("I will remind you here."),
            text("Sunny."),
        )
        tg.push_text(OWNER, "@test_bot remind me to pack", chat_id=FORUM, thread_id=trips)
        await tg.wait_for(
            lambda: "I will remind you here." in tg.topic_texts(FORUM, trips), what="the reminder set"
        )
        created = json.loads(llm.requests[3]["messages"][-1]["content"])
        assert created.get("ok"), created
        schedules = h.services.schedules
        real = schedules.service.clock
        schedules.service.clock = lambda: real() + timedelta(hours=1)  # the hour has passed
        schedules.wake()
        await wait_sent(h, created["id"])
        assert any("Pack the bags" in t for t in tg.topic_texts(FORUM, trips)), tg.describe_calls()

        tg.push_voice(OWNER, make_wav(0.5), duration=2, chat_id=FORUM, thread_id=trips, caption="@test_bot")
        await tg.wait_for(
            lambda: any("Sunny." in t for t in tg.topic_texts(FORUM, trips)), what="the voice answer"
        )
        await tg.wait_for_call("sendVoice", chat_id=FORUM)
        (voice,) = [c for c in sends(tg, FORUM) if c.method == "sendVoice"]
        assert voice.ok and voice.params.get("message_thread_id") == trips
        assert tg.topic_texts(FORUM, None) == []  # nothing went to General
        assert all(c.ok for c in sends(tg, FORUM)), tg.describe_calls()


async def test_a_reply_thread_in_a_normal_supergroup_is_still_the_group_itself(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("Hi group."), text("Reply seen."))
    async with running_bot(tmp_path, tg, llm, allowed_chat_ids=str(GROUP)) as h:
        tg.push_text(OWNER, "@test_bot hello", chat_id=GROUP)
        await h.final_text(GROUP, "Hi group.")
        # Telegram gives a reply in a supergroup the message_thread_id of its thread of replies.
        tg.push_text(FRIEND, "really?", chat_id=GROUP, first_name="Bob", reply_to=tg.last_message(GROUP))
        await h.final_text(GROUP, "Reply seen.")
        assert users_said(llm.requests[1])[0] == "[Ann in the group:] hello"  # the same session
        calls = sends(tg, GROUP)
        assert all(c.ok and "message_thread_id" not in c.params for c in calls), tg.describe_calls()
