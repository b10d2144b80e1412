"""Bad input of every kind gets a clear answer, and the message row (and whatever file came) is kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from db.models import MediaFile, Message
from tests.support.fakes.openai_api import FakeLLM, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, rows, running_bot
from tests.support.media_files import make_encrypted_pdf, make_pdf

BIG = 25 * 1024 * 1024


@pytest.mark.slow
async def test_every_bad_input_is_answered_and_kept(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    cases = [
        (lambda: tg.push_document(OWNER, b"x", "huge.zip", "application/zip", file_size=BIG), "20 MB"),
        (
            lambda: tg.push_document(
                OWNER, make_encrypted_pdf("secret plan"), "locked.pdf", "application/pdf"
            ),
            "encrypted",
        ),
        (
            lambda: tg.push_document(
                OWNER, b"%PDF-1.4\n1 0 obj <<\ngarbage", "broken.pdf", "application/pdf"
            ),
            "seems broken",
        ),
        (
            lambda: tg.push_document(
                OWNER, b"\x00\x01\x02binary\x00", "blob.bin", "application/octet-stream"
            ),
            "cannot read this kind of file (.bin)",
        ),
        (lambda: tg.push_voice(OWNER, b"x", duration=10, file_size=BIG), "20 MB"),
        (lambda: tg.push_photo(OWNER, caption="huge", data=b"\xff\xd8" + b"x" * 100), None),
        (lambda: tg.push_sticker(OWNER), "Stickers are not supported"),
        (lambda: tg.push_location(OWNER, 52.52, 13.405), "Locations are not supported"),
    ]
    llm.script(text("Photo fine."))
    async with running_bot(tmp_path, tg, llm) as h:
        for n, (push, expected) in enumerate(cases):
            before = len(tg.sent_texts(OWNER))
            push()
            if expected is None:
                await h.final_text(OWNER, "Photo fine.")
                continue

            def answered(expected: str = expected, before: int = before) -> str | None:
                return next((t for t in tg.sent_texts(OWNER)[before:] if expected in t), None)

            reply = await tg.wait_for(answered, what=f"case {n}: {expected!r}")
            assert "went wrong" not in reply
            if "not supported" in reply:
                assert "voice notes" in reply and "PDF" in reply  # says what is supported
        users = [m for m in rows(h, Message) if m["role"] == "user"]
        assert len(users) == len(cases)  # a message row in every case
        assert [m["content"] for m in users][-2:] == ["[sticker \U0001f44d]", "[location 52.52000, 13.40500]"]
        media = {f["file_name"]: f for f in rows(h, MediaFile)}
        assert media["huge.zip"]["status"] == "too_big" and media["huge.zip"]["size"] == BIG
        assert media["huge.zip"]["sha256"] is None
        # Unreadable files are kept (bytes and row) with the reason.
        for name in ("locked.pdf", "broken.pdf", "blob.bin"):
            assert media[name]["status"] == "unreadable" and media[name]["sha256"] and media[name]["detail"]
        assert media["voice.ogg"]["status"] == "too_big"
        assert llm.transcription_requests == []


async def test_a_pdf_without_text_says_so(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    llm.script(text("Noted."))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_document(OWNER, make_pdf([""]), "scan.pdf", "application/pdf")
        await h.final_text(OWNER, "Noted.")
        assert "no text layer" in llm.requests[0]["messages"][-1]["content"]
