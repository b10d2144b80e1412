"""Voice notes, photos and files take the same turn path as text: /stop, the queue and bursts, the inbox
across a restart, and the group rules (a caption mention or a reply addresses the bot)."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from db.models import InboxMessage, MediaFile, Message
from db.runtime import Entry
from db.speakers import Speaker
from tests.support.fakes.openai_api import FakeLLM, TextStep, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, Harness, rows, running_bot
from tests.support.media_files import make_png, make_wav, user_content

GROUP = -100777
OTHER_GROUP = -100888
LONG = "word " * 400  # a long answer, of which only the start is ever streamed


def slow_text(content: str = LONG, hold: asyncio.Event | None = None) -> TextStep:
    """The start of a long answer, then a stream held open until `hold` is set (by default never): the turn
    is still running while the test acts, however slow the machine (no race with its end)."""
    return text(content[:200], chunk_size=5, hold=hold or asyncio.Event())


def images(content: Any) -> list[str]:
    """The image URLs of a message content (a list of parts, or text)."""
    if not isinstance(content, list):
        return []
    return [p["image_url"]["url"] for p in content if p["type"] == "image_url"]


def texts(content: Any) -> str:
    """The text of a message content."""
    if isinstance(content, str):
        return content
    return "".join(p["text"] for p in content if p["type"] == "text")


def users_said(request: dict[str, Any]) -> list[str]:
    """The text of each user message of a chat request, in order."""
    return [texts(m["content"]) for m in request["messages"] if m["role"] == "user"]


def waiting(h: Harness) -> list[str]:
    """The texts waiting in the inbox."""
    with h.services.engine.connect() as conn:
        return [r[0] for r in conn.execute(select(InboxMessage.content).order_by(InboxMessage.id))]


async def streaming_preview(tg: FakeTelegram, chat: int) -> dict[str, Any]:
    """Wait for the streamed preview that carries the Stop button."""

    def preview() -> dict[str, Any] | None:
        msgs = tg.messages.get(chat, [])
        return next((m for m in msgs if "reply_markup" in m and "word" in str(m.get("text"))), None)

    found: dict[str, Any] = await tg.wait_for(preview, what="the streamed preview with its Stop button")
    return found


async def test_stop_ends_a_photo_turn_mid_stream(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    llm.script(slow_text(), text("Next answer."))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_photo(OWNER, caption="describe it at length")
        preview = await streaming_preview(tg, OWNER)
        assert preview["reply_markup"]["inline_keyboard"][0][0]["text"] == "Stop"
        tg.push_text(OWNER, "/stop")
        stopped = await h.final_text(OWNER, "(stopped)")
        assert stopped.startswith("word word") and len(stopped) < len(LONG)
        await tg.wait_for(lambda: llm.disconnects == 1, what="the LLM stream closed by the client")
        (asked,) = [m for m in rows(h, Message) if m["role"] == "user"]
        assert asked["status"] == "stopped" and asked["content"].startswith("describe it at length")
        (photo,) = rows(h, MediaFile)
        assert photo["message_id"] == asked["id"]  # the photo stays with the stopped message
        # The chat is free, and the next turn still sees the photo with its message.
        tg.push_text(OWNER, "and now?")
        await h.final_text(OWNER, "Next answer.")
        first_user = next(m for m in llm.requests[1]["messages"] if m["role"] == "user")
        assert len(images(first_user["content"])) == 1


async def test_a_group_photo_is_answered_only_with_a_caption_mention_or_a_reply(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    png = make_png()
    llm.script(text("A photo for the group."), text("Two for the group."), text("Heard in the group."))
    llm.transcript = "what do you think"
    async with running_bot(tmp_path, tg, llm, allowed_chat_ids=str(GROUP)) as h:
        tg.push_photo(OWNER, chat_id=GROUP, caption="look at my cat")  # not for the bot
        tg.push_voice(FRIEND, make_wav(0.3), duration=2, chat_id=GROUP)  # not a reply to the bot
        tg.push_photo(OWNER, chat_id=GROUP, caption="@test_bot what is this?")
        answer = await h.final_text(GROUP, "A photo for the group.")
        assert len(llm.requests) == 1 and tg.sent_texts(GROUP) == [answer]
        said = users_said(llm.requests[0])
        assert said == ["[Ann in the group:] what is this?\n\n[photo 1: photo.jpg]"]  # no @name, no cat
        assert len(images(user_content(llm.requests[0]))) == 1
        assert llm.transcription_requests == []  # the unaddressed voice note was not even downloaded

        # An album: only its first item carries the caption with the mention; the rest come along.
        tg.push_photo(OWNER, chat_id=GROUP, caption="@test_bot compare", media_group_id="album-g")
        tg.push_document(OWNER, png, "second.png", "image/png", chat_id=GROUP, media_group_id="album-g")
        await h.final_text(GROUP, "Two for the group.")
        assert len(images(user_content(llm.requests[1]))) == 2

        # A voice note counts when it replies to the bot.
        tg.push_voice(FRIEND, make_wav(0.3), duration=2, chat_id=GROUP, reply_to=tg.last_message(GROUP))
        heard = await h.final_text(GROUP, "Heard in the group.")
        assert heard.startswith("heard: \u201cwhat do you think\u201d")
        said = users_said(llm.requests[2])
        assert said[-1].startswith("[Ann in the group:] [The user replies to your")  # the fake's default name
        assert said[-1].endswith("\n\nwhat do you think")
        assert len(llm.requests) == 3


async def test_an_unlisted_groups_photo_gets_the_refusal_and_no_llm_request(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, allowed_chat_ids=str(GROUP)) as h:
        tg.push_photo(OWNER, chat_id=OTHER_GROUP, caption="@test_bot what is this?")
        refusal = await h.final_text(OTHER_GROUP, "not on my list of chats")
        assert str(OTHER_GROUP) in refusal and llm.requests == [] and rows(h, MediaFile) == []


@pytest.mark.slow
async def test_a_voice_note_sent_during_a_text_turn_waits_and_joins_the_next_text(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.transcript = "also book a table"
    release = asyncio.Event()
    llm.script(slow_text(hold=release), text("Both done."))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "plan my evening")
        await streaming_preview(tg, OWNER)
        tg.push_voice(OWNER, make_wav(0.5), duration=3)
        await tg.wait_for(lambda: waiting(h) == ["also book a table"], what="the voice note in the inbox")
        tg.push_text(OWNER, "for two people")
        await tg.wait_for(lambda: len(waiting(h)) == 2, what="the text queued after it")
        release.set()  # the first turn ends only now: both wait behind it, whatever the machine's speed
        answer = await h.final_text(OWNER, "Both done.")
        assert answer.startswith("heard: \u201calso book a table\u201d")
        first, second = llm.requests
        assert users_said(first) == ["plan my evening"]
        # After the running turn, in arrival order, as one turn; the first answer came before.
        assert users_said(second) == ["plan my evening", "also book a table", "for two people"]
        assistant = [m for m in second["messages"] if m["role"] == "assistant"]
        assert assistant and str(assistant[0]["content"]).startswith("word word")
        stored = [(m["content"], m["status"]) for m in rows(h, Message) if m["role"] == "user"]
        assert stored[1:] == [("also book a table", "answered"), ("for two people", "answered")]
        (voice,) = rows(h, MediaFile)
        assert voice["message_id"] == [m["id"] for m in rows(h, Message) if m["role"] == "user"][1]
        assert waiting(h) == []


async def test_media_left_waiting_by_a_restart_are_answered_with_their_photo_and_heard_line(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    photo = b"\xff\xd8\xff\xe0left-waiting\xff\xd9"

    def leftovers(services: Any) -> None:
        row = services.media.image(OWNER, OWNER, "photo.jpg", "image/jpeg", photo)
        inbox = services.conversations.inbox
        what = f"what is it?\n\n[photo {row}: photo.jpg]"
        inbox.put(Entry(Speaker(OWNER, OWNER, "private"), what, media={"ids": [row]}))
        inbox.put(
            Entry(Speaker(FRIEND, FRIEND, "private"), "good night", media={"ids": [], "heard": "good night"})
        )

    # Both chats' waiting messages are answered at start, side by side, in either order: the answer depends
    # on what is asked, not on which request reaches the LLM first.
    llm.default = lambda req: text("A photo answer." if "what is it?" in str(req) else "Night answer.")
    async with running_bot(tmp_path, tg, llm, setup=leftovers) as h:
        await h.final_text(OWNER, "A photo answer.")
        night = await h.final_text(FRIEND, "Night answer.")
        assert night.startswith("heard: \u201cgood night\u201d")
        asked = next(r for r in llm.requests if "what is it?" in str(r))
        assert images(user_content(asked)) == ["data:image/jpeg;base64," + base64.b64encode(photo).decode()]
        assert waiting(h) == []
