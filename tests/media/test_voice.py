"""Voice notes, audio and round videos: transcribed, answered like text, accounted; failures lose nothing."""

from __future__ import annotations

from pathlib import Path

from core_tools.usage.prices import PriceTable, spend_of
from db.models import LLMCall, MediaFile, Message
from tests.support.fakes.openai_api import FakeLLM, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, rows, running_bot
from tests.support.media_files import make_ogg_opus, make_wav, user_content


async def test_voice_note_is_transcribed_answered_shown_and_accounted(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    audio = make_wav(1.0)
    llm.transcript = "remind me what a voice note is"
    llm.script(text("A voice note is a short recording."))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_voice(OWNER, audio, duration=5)
        answer = await h.final_text(OWNER, "A voice note is a short recording.")
        # The user sees what was heard, quoted, above the answer.
        assert answer.startswith("heard: \u201cremind me what a voice note is\u201d")
        entities = tg.last_message(OWNER).get("entities") or []
        assert entities[0]["type"] == "blockquote" and entities[0]["offset"] == 0
        # The audio went to the endpoint as Telegram delivered it, with the configured model.
        sent = llm.transcription_requests[0]
        assert sent["bytes"] == audio and sent["model"] == "whisper-1" and sent["filename"] == "voice.ogg"
        # The transcript is the user's message of a normal turn.
        assert user_content(llm.requests[0]) == "remind me what a voice note is"
        messages = [m for m in rows(h, Message) if m["role"] == "user"]
        assert [(m["content"], m["status"]) for m in messages] == [
            ("remind me what a voice note is", "answered")
        ]
        media = rows(h, MediaFile)
        assert [(f["kind"], f["duration_s"], f["status"], f["message_id"]) for f in media] == [
            ("voice", 5, "transcribed", messages[0]["id"])
        ]
        stored = tmp_path / "data" / "media" / media[0]["sha256"][:2] / media[0]["sha256"]
        assert stored.read_bytes() == audio
        # A recorded call of purpose transcribe, priced per minute: 5 s of whisper-1 at $0.006 a minute.
        calls = [c for c in rows(h, LLMCall) if c["purpose"] == "transcribe"]
        assert [(c["model"], c["audio_seconds"], c["error"]) for c in calls] == [("whisper-1", 5, None)]
        since = calls[0]["created_at"].replace(year=2000)
        usage = h.services.usage_service.queries.model_usage(OWNER, since, since.replace(year=2100))
        spend = spend_of([u for u in usage if u.purpose == "transcribe"], PriceTable())
        assert abs(spend.cost - 0.0005) < 1e-9
        # "typing" showed from the transcription on; the turn right after it did not send it a second time.
        assert len(tg.calls_to("sendChatAction")) == 1


async def test_long_transcript_is_collapsed_and_audio_and_round_video_work(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.transcript = "word " * 80
    llm.script(text("Long one."), text("Round one."))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_voice(OWNER, make_wav(0.5), duration=40, kind="audio", mime_type="audio/mpeg")
        await h.final_text(OWNER, "Long one.")
        assert tg.last_message(OWNER)["entities"][0]["type"] == "expandable_blockquote"
        assert llm.transcription_requests[0]["filename"] == "recording.mp3"
        llm.transcript = "a round video"
        tg.push_voice(OWNER, b"\x00\x00\x00\x18ftypmp42", duration=3, kind="video_note")
        await h.final_text(OWNER, "Round one.")
        assert llm.transcription_requests[1]["filename"] == "video_note.mp4"
        assert [f["kind"] for f in rows(h, MediaFile)] == ["audio", "video_note"]


async def test_transcription_is_refused_before_the_request_over_a_cap(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, budget_daily_usd=0) as h:
        tg.push_voice(OWNER, make_wav(0.2), duration=4)
        reply = await h.final_text(OWNER, "Usage cap reached")
        assert "voice note is saved" in reply
        assert llm.transcription_requests == [] and llm.requests == []
        assert [(f["status"], f["sha256"] is not None) for f in rows(h, MediaFile)] == [("failed", True)]
        assert [m["status"] for m in rows(h, Message)] == ["failed"]


async def test_no_endpoint_or_a_failing_one_says_what_to_configure_and_keeps_the_note(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    audio = make_wav(0.3)
    async with running_bot(tmp_path, tg, llm, transcription_model="") as h:
        tg.push_voice(OWNER, audio, duration=3)
        reply = await h.final_text(OWNER, "no transcription endpoint is configured")
        assert "TRANSCRIPTION_MODEL" in reply and "saved" in reply
        assert llm.transcription_requests == []
        assert [(f["status"], f["size"]) for f in rows(h, MediaFile)] == [("kept", len(audio))]
        assert len(rows(h, Message)) == 1
    llm.transcription_status = 500
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_voice(OWNER, audio, duration=3)
        reply = await h.final_text(OWNER, "could not transcribe")
        assert "TRANSCRIPTION_BASE_URL" in reply and "saved" in reply
        failed = [c for c in rows(h, LLMCall) if c["purpose"] == "transcribe"]
        assert failed and failed[-1]["error"] is not None
        assert [f["status"] for f in rows(h, MediaFile)] == ["kept", "failed"]
        assert len(rows(h, Message)) == 2 and llm.requests == []


async def test_voice_note_over_the_limit_is_kept_not_transcribed(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm, voice_max_seconds=10) as h:
        tg.push_voice(OWNER, make_wav(0.2), duration=75)
        reply = await h.final_text(OWNER, "1:15 long")
        assert "0:10" in reply and "saved" in reply
        assert llm.transcription_requests == []
        assert [f["status"] for f in rows(h, MediaFile)] == ["too_long"]
        assert [m["status"] for m in rows(h, Message)] == ["unsupported"]


async def test_voice_answer_comes_back_as_a_voice_note_with_tts(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("Spoken answer."))
    async with running_bot(tmp_path, tg, llm, tts_model="tts-1") as h:
        tg.push_voice(OWNER, make_wav(0.2), duration=2)
        await h.final_text(OWNER, "Spoken answer.")
        (call,) = await tg.wait_for_call("sendVoice", chat_id=OWNER)
        assert call.params["voice"].data == llm.speech_audio
        spoken = llm.speech_requests[0]
        assert spoken["input"] == "Spoken answer." and spoken["response_format"] == "opus"
        assert spoken["model"] == "tts-1"
        speech = [c for c in rows(h, LLMCall) if c["purpose"] == "speech"]
        assert [(c["model"], c["prompt_tokens"]) for c in speech] == [("tts-1", len("Spoken answer."))]


def test_a_transcription_price_per_minute_can_be_set_in_llm_prices() -> None:
    from core_tools.usage.prices import parse_prices

    table = PriceTable(parse_prices('{"local-whisper": {"per_minute": 0.01}}'))
    assert table.cost("local-whisper", 0, 0, 0, audio_seconds=90) == 0.015
    assert table.cost("whisper-1", 0, 0, 0, audio_seconds=60) == 0.006


async def test_a_voice_note_is_bounded_by_the_audio_it_carries_not_by_what_it_declares(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    # Two minutes of audio; Telegram's duration and the file's own header (its granule positions) say 1 s.
    forged = make_ogg_opus(120, header_seconds=1)
    async with running_bot(tmp_path, tg, llm, voice_max_seconds=60) as h:
        tg.push_voice(OWNER, forged, duration=1)
        reply = await h.final_text(OWNER, "I transcribe up to 1:00")
        assert "at least 1:0" in reply and "its app said 0:01" in reply and "saved" in reply
        assert llm.transcription_requests == []
        assert [(f["status"], f["size"]) for f in rows(h, MediaFile)] == [("too_long", len(forged))]
        assert [m["status"] for m in rows(h, Message)] == ["unsupported"]


async def test_the_cap_holds_against_voice_notes_that_understate_their_length(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    # whisper-1 at $0.006 a minute: 90 s is $0.009, under the $0.01 cap. A request starts while the spend
    # is under the cap, so the second note is still transcribed (its answer is not), the third is not.
    note = make_ogg_opus(90)
    llm.transcript = "a long story"
    llm.script(text("Heard one."))
    async with running_bot(tmp_path, tg, llm, budget_daily_usd=0.01) as h:
        tg.push_voice(OWNER, note, duration=1)
        await h.final_text(OWNER, "Heard one.")
        tg.push_voice(OWNER, note, duration=1)
        await h.final_text(OWNER, "Usage cap reached")
        tg.push_voice(OWNER, note, duration=1)
        reply = await h.final_text(OWNER, "voice note is saved")
        assert "Usage cap reached" in reply and "$0.0180 is spent" in reply
        assert len(llm.transcription_requests) == 2 and len(llm.requests) == 1
        calls = [c for c in rows(h, LLMCall) if c["purpose"] == "transcribe"]
        assert [c["audio_seconds"] for c in calls] == [90, 90]
        assert [f["duration_s"] for f in rows(h, MediaFile)] == [90, 90, 90]
        assert [f["status"] for f in rows(h, MediaFile)] == ["transcribed", "transcribed", "failed"]


def test_the_length_of_honest_and_forged_recordings() -> None:
    from core_tools.media.audio import audio_length

    assert audio_length(make_ogg_opus(3), 3, "voice").seconds == 3  # an honest voice note
    assert audio_length(make_wav(2.0), 0, "audio").seconds == 2  # WAV: its header, as decoders read it
    assert audio_length(make_wav(1.0), 5, "voice").seconds == 5  # declared longer: the declared counts
    # The packets are counted, whatever the granule positions say; counting stops past the limit.
    forged = audio_length(make_ogg_opus(600, header_seconds=1), 1, "voice", stop_after=30)
    assert 30 < forged.seconds < 40 and forged.at_least and forged.understated
    # Nothing readable: the size at 320 kbit/s is the floor (a 20 MB blob is at least 500 s).
    assert audio_length(b"\x01" * 20_000_000, 1, "audio").seconds == 500
