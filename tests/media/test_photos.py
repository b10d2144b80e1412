"""Photos go to the model as image parts with their caption; albums are one turn; LLM_VISION auto/on/off."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from db.models import MediaFile, Message
from tests.support.fakes.openai_api import FakeLLM, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, rows, running_bot
from tests.support.media_files import make_png, user_content


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


async def test_photo_goes_with_its_caption_as_an_image_part(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    photo = b"\xff\xd8\xff\xe0real-jpeg-bytes\xff\xd9"
    llm.script(text("A red square."))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_photo(OWNER, caption="what is this?", data=photo)
        await h.final_text(OWNER, "A red square.")
        content = user_content(llm.requests[0])
        assert content[0]["type"] == "text" and content[0]["text"].startswith("what is this?")
        assert images(content) == ["data:image/jpeg;base64," + base64.b64encode(photo).decode()]
        (media,) = rows(h, MediaFile)
        assert media["kind"] == "photo" and media["size"] == len(photo) and media["status"] == "ok"
        stored = tmp_path / "data" / "media" / media["sha256"][:2] / media["sha256"]
        assert stored.read_bytes() == photo
        assert [m["status"] for m in rows(h, Message) if m["role"] == "user"] == ["answered"]


async def test_an_album_is_one_turn_and_an_image_file_counts_as_a_photo(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    png = make_png()
    llm.script(text("Two pictures."))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_photo(OWNER, caption="compare these", media_group_id="album-1")
        tg.push_document(OWNER, png, "diagram.png", "image/png", media_group_id="album-1")
        await h.final_text(OWNER, "Two pictures.")
        assert len(llm.requests) == 1
        content = user_content(llm.requests[0])
        urls = images(content)
        assert len(urls) == 2 and urls[1] == "data:image/png;base64," + base64.b64encode(png).decode()
        assert "compare these" in texts(content) and "diagram.png" in texts(content)
        assert len([m for m in rows(h, Message) if m["role"] == "user"]) == 1


async def test_auto_vision_falls_back_once_and_remembers(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.reject_images = True
    llm.script(text("I read your caption."), text("Caption again."))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_photo(OWNER, caption="is my cat cute?")
        answer = await h.final_text(OWNER, "I read your caption.")
        assert "cannot see images" in answer
        first, retry = llm.requests
        assert images(user_content(first)) and not images(user_content(retry))
        assert "is my cat cute?" in texts(user_content(retry))
        tg.push_photo(OWNER, caption="and this one?")
        answer = await h.final_text(OWNER, "Caption again.")
        assert "cannot see images" in answer
        assert len(llm.requests) == 3 and not images(user_content(llm.requests[2]))  # remembered: no retry


async def test_vision_off_never_sends_images_and_on_reports_a_rejection(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("Only words."))
    async with running_bot(tmp_path, tg, llm, llm_vision="off") as h:
        tg.push_photo(OWNER, caption="look")
        await h.final_text(OWNER, "Only words.")
        assert not images(user_content(llm.requests[0]))
    llm.reject_images = True
    async with running_bot(tmp_path, tg, llm, llm_vision="on") as h:
        tg.push_photo(OWNER, caption="look again")
        reply = await h.final_text(OWNER, "rejected the image")
        assert "LLM_VISION" in reply and "saved" in reply
        assert [m["status"] for m in rows(h, Message) if m["role"] == "user"][-1] == "failed"


async def test_history_resends_only_the_most_recent_images(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(*(text(f"Seen {i}.") for i in range(4)))
    async with running_bot(tmp_path, tg, llm, vision_history_images=2) as h:
        for i in range(4):
            tg.push_photo(OWNER, caption=f"picture {i}", data=f"jpeg-{i}".encode())
            await h.final_text(OWNER, f"Seen {i}.")
        last = llm.requests[-1]
        users = [m["content"] for m in last["messages"] if m["role"] == "user"]
        assert [len(images(c)) for c in users] == [0, 0, 1, 1]
        assert images(users[-1]) == ["data:image/jpeg;base64," + base64.b64encode(b"jpeg-3").decode()]
        assert "[photo 1: photo.jpg]" in texts(users[0])  # the older ones keep a short stand-in
