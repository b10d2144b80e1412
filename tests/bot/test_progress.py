"""Progress on long work: a code run says for how long it has run and what it printed last; a slow
transcription or file reading says what the bot is doing (and the note goes away once it is done)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.fakes.openai_api import FakeLLM, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, running_bot
from tests.support.media_files import make_wav

STEPS = """import time
print("step 1")
time.sleep(3)
print("step 2")
time.sleep(3)
print("done")
"""


def shown(tg: FakeTelegram, chat: int) -> list[str]:
    """Every text the bot sent or edited into the chat, in order (also ones later replaced or deleted)."""
    return [
        str(c.params.get("text"))
        for c in tg.calls
        if c.method in ("sendMessage", "editMessageText") and c.params.get("chat_id") == chat and c.ok
    ]


@pytest.mark.slow
async def test_a_long_code_run_shows_its_elapsed_time_and_last_line_of_output(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(
        tool_calls(call("code", {"action": "execute", "code": STEPS})),
        text("It counted to two."),
    )
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "count slowly to two")
        await h.final_text(OWNER, "It counted to two.")
        progress = [t for t in shown(tg, OWNER) if re.search(r"running code\.\.\. \d+ s", t)]
        assert progress, tg.describe_calls()
        assert any("last output: step 1" in t or "last output: step 2" in t for t in progress), progress
        # The answer replaced the status line.
        assert "running code" not in tg.sent_texts(OWNER)[-1]


@pytest.mark.slow
async def test_a_slow_transcription_says_what_it_is_doing_and_then_goes_away(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.transcript = "remind me about the dentist"
    llm.transcription_delay = 6.0
    llm.script(text("Noted: the dentist."))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_voice(OWNER, make_wav(0.5), duration=3)
        await h.final_text(OWNER, "Noted: the dentist.")
        notes = [t for t in shown(tg, OWNER) if "transcribing your voice" in t]
        assert notes and re.search(r"\d+ s", notes[0]), tg.describe_calls()
        # Deleted once the transcript was there: the chat keeps only the answer.
        assert not any("transcribing" in t for t in tg.sent_texts(OWNER))
        assert tg.calls_to("deleteMessage")


@pytest.mark.slow
async def test_a_slow_file_download_and_reading_says_so(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("The file lists three fruits."))
    tg.fail_next("getFile", error="hang", hang=4.0)  # under PTB's 5 s read timeout
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_document(OWNER, b"apple\npear\nplum\n", "fruits.txt", "text/plain")
        await h.final_text(OWNER, "The file lists three fruits.")
        assert any("reading fruits.txt..." in t for t in shown(tg, OWNER)), tg.describe_calls()
        assert not any("reading fruits.txt" in t for t in tg.sent_texts(OWNER))
