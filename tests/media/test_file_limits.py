"""Files that explode: their text is read in a worker held to limits, never in the bot or on its event loop;
whatever happens the user is told why, and the message and the file's row are kept."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bot.runtime.services import Services
from core_tools.media.reader import FileReader, ReadLimits
from db.models import MediaFile, Message
from tests.support.fakes.openai_api import FakeLLM, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, rows, running_bot
from tests.support.media_files import (
    make_paragraphs_docx,
    make_shared_stream_pdf,
    make_zip_bomb_docx,
    peak_rss,
    peak_rss_reset,
    user_content,
)

DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
MB = 1024 * 1024

# A worker that waits for `open` in the folder given first (after touching `started`), then reads as usual.
GATED = """
import pathlib, runpy, sys, time
gate = pathlib.Path(sys.argv.pop(1))
(gate / "started").touch()
while not (gate / "open").exists():
    time.sleep(0.05)
runpy.run_module("core_tools.media.worker", run_name="__main__")
"""


def gated(gate: Path, timeout_s: float = 60.0) -> ReadLimits:
    """Reading limits whose worker waits at `gate` until the test opens it."""
    return ReadLimits(timeout_s=timeout_s, worker=(sys.executable, "-c", GATED, str(gate)))


def reader(limits: ReadLimits) -> Callable[[Services], None]:
    """A harness `setup` that gives the bot's media service a reader with these limits."""

    def setup(services: Services) -> None:
        assert services.media is not None
        services.media.reader = FileReader(limits)

    return setup


@pytest.mark.slow
async def test_explosive_files_cost_the_worker_not_the_bot(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    bomb = make_zip_bomb_docx(400)  # about 440 KB, 400 MB unpacked
    many = make_paragraphs_docx(300_000)  # about 40 KB of 300,000 empty paragraphs
    pdf = make_shared_stream_pdf(20, 1_000_000)  # 8 KB: 20 pages showing one 1 MB text stream
    backtracking = b',"' * 31_000  # 62 KB that sent csv.Sniffer's regular expression backtracking
    unclosed = b'"' + b"x" * 200_000 + b"\nnorth,10\n"  # a first field that never closes
    llm.script(text("Read many."), text("Read the PDF."), text("Read commas."), text("Read quote."))
    async with running_bot(tmp_path, tg, llm) as h:
        before = peak_rss_reset()
        tg.push_document(OWNER, bomb, "bomb.docx", DOCX)
        reply = await h.final_text(OWNER, "too large when unpacked", timeout=120)
        assert "401 MB" in reply and "went wrong" not in reply

        tg.push_document(OWNER, many, "many.docx", DOCX)
        await h.final_text(OWNER, "Read many.", timeout=120)
        assert "300000 paragraphs" in user_content(llm.requests[0])

        tg.push_document(OWNER, pdf, "shared.pdf", "application/pdf")
        await h.final_text(OWNER, "Read the PDF.", timeout=120)
        assert "20 pages" in user_content(llm.requests[1]) and "text cut at" in user_content(llm.requests[1])

        tg.push_document(OWNER, backtracking, "commas.csv", "text/csv")
        await h.final_text(OWNER, "Read commas.", timeout=120)

        tg.push_document(OWNER, unclosed, "quote.csv", "text/csv")
        await h.final_text(OWNER, "Read quote.", timeout=120)
        assert "a quote is not closed" in user_content(llm.requests[3])

        # Inflating the bomb alone would have taken the bot 400 MB; the worker paid for all of it.
        assert peak_rss() - before < 150 * MB
        users = [m for m in rows(h, Message) if m["role"] == "user"]
        assert len(users) == 5
        media = {f["file_name"]: f for f in rows(h, MediaFile)}
        assert media["bomb.docx"]["status"] == "unreadable" and media["bomb.docx"]["sha256"]
        assert "too large when unpacked" in media["bomb.docx"]["detail"]
        assert media["bomb.docx"]["message_id"] == users[0]["id"]  # the file belongs to its message
        for name in ("many.docx", "shared.pdf", "commas.csv", "quote.csv"):
            assert media[name]["status"] == "extracted", name
        # The PDF's text is cut at FILE_MAX_TEXT_CHARS (20 MB of it before), on disk too.
        limit = h.settings.file_max_text_chars
        assert 0 < media["shared.pdf"]["text_chars"] <= limit
        stored = tmp_path / "data" / "media" / media["shared.pdf"]["sha256"][:2]
        assert (stored / f"{media['shared.pdf']['sha256']}.txt").stat().st_size <= limit


@pytest.mark.slow
async def test_a_file_over_the_memory_limit_is_refused_and_the_bot_goes_on(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    # 20 MB of paragraphs: under the unpacking limit (a quarter of 128 MB), far over 128 MB once parsed.
    dense = make_paragraphs_docx(600_000, b"<w:p><w:r><w:t>x</w:t></w:r></w:p>")
    llm.script(text("Still here."))
    async with running_bot(tmp_path, tg, llm, file_read_memory_mb=128) as h:
        tg.push_document(OWNER, dense, "dense.docx", DOCX)
        reply = await h.final_text(OWNER, "memory", timeout=120)
        assert "needs more than 128 MB of memory" in reply and "FILE_READ_MEMORY_MB" in reply
        tg.push_text(OWNER, "are you there?")
        await h.final_text(OWNER, "Still here.")
        (media,) = rows(h, MediaFile)
        assert media["status"] == "unreadable" and "128 MB" in media["detail"]
        assert [m["content"] for m in rows(h, Message) if m["role"] == "user"][1] == "are you there?"


@pytest.mark.slow
async def test_another_chat_is_answered_while_a_file_is_being_read(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()
    llm.script(text("Hello friend."), text("Your notes say hi."))
    async with running_bot(tmp_path, tg, llm, setup=reader(gated(gate))) as h:
        tg.push_document(OWNER, b"hi from my notes\n", "notes.txt", "text/plain")
        await tg.wait_for(lambda: (gate / "started").exists(), timeout=60, what="the worker to start")
        # The owner's file is being read (its worker waits at the gate): the friend is answered meanwhile.
        tg.push_text(FRIEND, "hello")
        await h.final_text(FRIEND, "Hello friend.")
        assert tg.sent_texts(OWNER) == []
        (gate / "open").touch()
        await h.final_text(OWNER, "Your notes say hi.", timeout=60)
        assert "hi from my notes" in user_content(llm.requests[1])


async def test_a_file_read_past_the_deadline_is_stopped_and_kept(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    gate = tmp_path / "gate"
    gate.mkdir()  # never opened: the worker never finishes
    llm.script(text("Hello friend."))
    async with running_bot(tmp_path, tg, llm, setup=reader(gated(gate, timeout_s=1))) as h:
        tg.push_document(OWNER, b"slow notes\n", "slow.txt", "text/plain")
        reply = await h.final_text(OWNER, "took longer than 1 s", timeout=60)
        assert "slow.txt" in reply and "FILE_READ_TIMEOUT_S" in reply
        tg.push_text(FRIEND, "hello")
        await h.final_text(FRIEND, "Hello friend.")
        (media,) = rows(h, MediaFile)
        assert media["status"] == "unreadable" and media["message_id"] is not None
        assert [m["status"] for m in rows(h, Message) if m["chat_id"] == OWNER] == ["unsupported"]
