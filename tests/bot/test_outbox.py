"""The runtime's outbox through the Bot API (bot/adapter/outbox.py) against the fake Telegram: a conversation
key reaches its forum topic, Markdown is rendered (plain when the entities are refused), buttons become the
inline keyboard whose data the handlers read, a file is a document, and Telegram's errors arrive as the
runtime's (what the schedule runner and the backups decide on)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import Engine
from telegram import Bot

from bot.adapter.outbox import TelegramOutbox
from bot.runtime.outbox import Blocked, DeliveryFailed, Refused, RetryLater
from db.topics import Topics
from tests.support.fakes.telegram_api import FakeTelegram, UploadedFile
from tests.support.harness import OWNER, TOKEN

FORUM = -1003070712535


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[Bot]:
    async with Bot(TOKEN, base_url=tg.base_url) as b:
        yield b


async def test_markdown_buttons_and_a_forum_topic(tg: FakeTelegram, bot: Bot, engine: Engine) -> None:
    topics = Topics(engine)
    thread = tg.create_topic(FORUM, "Trips")
    outbox = TelegramOutbox(bot, topics)
    first = await outbox.send(
        topics.key(FORUM, thread),
        "**Due now**\n\n" + "word " * 1000,  # longer than one message
        markdown=True,
        buttons=((("Snooze 10 min", "sch:s10:7"), ("Done", "sch:done:7")),),
    )
    sent = [c for c in tg.calls_to("sendMessage") if c.ok]
    assert len(sent) > 1 and first == sent[0].result["message_id"]
    assert all(c.params["message_thread_id"] == thread for c in sent)
    assert sent[0].params["text"].startswith("Due now") and sent[0].params.get("entities")
    assert all("reply_markup" not in c.params for c in sent[:-1])  # the buttons go under the last part
    rows = sent[-1].params["reply_markup"]["inline_keyboard"]
    assert [[b["callback_data"] for b in row] for row in rows] == [["sch:s10:7", "sch:done:7"]]
    assert tg.topic_texts(FORUM, thread)[0].startswith("Due now")


async def test_refused_entities_fall_back_to_plain_text(tg: FakeTelegram, bot: Bot) -> None:
    tg.fail_next("sendMessage", error="cant_parse")
    await TelegramOutbox(bot, None).send(OWNER, "**bold** answer", markdown=True)
    assert tg.sent_texts(OWNER) == ["bold answer"]
    assert not tg.calls_to("sendMessage")[-1].params.get("entities")


async def test_plain_text_is_sent_as_it_is(tg: FakeTelegram, bot: Bot) -> None:
    message_id = await TelegramOutbox(bot, None).send(OWNER, "New day, **new** session")
    assert tg.sent_texts(OWNER) == ["New day, **new** session"]
    assert message_id == tg.last_message(OWNER)["message_id"]


async def test_a_file_is_a_document_of_its_name(tg: FakeTelegram, bot: Bot, tmp_path: Path) -> None:
    path = tmp_path / "backup-1.tar.age.000"
    path.write_bytes(b"\x00part")
    await TelegramOutbox(bot, None).send_file(OWNER, path, "backup-1: part 1 of 3")
    (call,) = tg.calls_to("sendDocument")
    document = call.params["document"]
    assert isinstance(document, UploadedFile)
    assert (document.filename, document.data) == ("backup-1.tar.age.000", b"\x00part")
    assert tg.sent_texts(OWNER) == ["backup-1: part 1 of 3"]


@pytest.mark.parametrize(
    ("error", "raised"),
    [
        ("forbidden", Blocked),
        ("retry_after", RetryLater),
        ("chat_not_found", Refused),
        ("server_error", DeliveryFailed),
    ],
)
async def test_telegrams_errors_arrive_as_the_runtimes(
    tg: FakeTelegram, bot: Bot, tmp_path: Path, error: str, raised: type[DeliveryFailed]
) -> None:
    outbox = TelegramOutbox(bot, None)
    tg.fail_next("sendMessage", error=error, retry_after=7)
    with pytest.raises(raised) as sent:
        await outbox.send(OWNER, "hello", buttons=((("Done", "sch:done:1"),),))
    assert type(sent.value) is raised
    if isinstance(sent.value, RetryLater):
        assert sent.value.seconds == 7.0
    path = tmp_path / "f.bin"
    path.write_bytes(b"x")
    tg.fail_next("sendDocument", error=error, retry_after=7)
    with pytest.raises(raised):
        await outbox.send_file(OWNER, path, "f")
