"""Prove the loopback fakes speak the wire protocols the real PTB and openai clients expect."""

from __future__ import annotations

import asyncio
import datetime as dtm
import json
from collections.abc import AsyncIterator
from typing import Any

import openai
import pytest
import telegram
from telegram import MessageEntity, Update
from telegram.error import BadRequest, NetworkError, RetryAfter, TimedOut
from telegram.ext import Application, ContextTypes, MessageHandler, filters

from tests.support.fakes.openai_api import FakeLLM, call, error, hang, stream_error, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram

TOKEN = "123:ABC"


@pytest.fixture
async def tg() -> AsyncIterator[FakeTelegram]:
    """A running FakeTelegram."""
    async with FakeTelegram(token=TOKEN) as server:
        yield server


@pytest.fixture
async def bot(tg: FakeTelegram) -> AsyncIterator[telegram.Bot]:
    """A real PTB Bot pointed at the fake."""
    async with telegram.Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url) as b:
        yield b


@pytest.fixture
async def llm() -> AsyncIterator[FakeLLM]:
    """A running FakeLLM."""
    async with FakeLLM() as server:
        yield server


@pytest.fixture
async def client(llm: FakeLLM) -> AsyncIterator[openai.AsyncOpenAI]:
    """A real AsyncOpenAI client pointed at the fake, without retries."""
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0) as c:
        yield c


# ---------------------------------------------------------------- Telegram


async def test_get_me_and_send_edit_with_entities(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """getMe, sendMessage with entities, editMessageText and the visible chat state."""
    me = await bot.get_me()
    assert (me.id, me.username, me.is_bot) == (123, "test_bot", True)

    bold = MessageEntity(MessageEntity.BOLD, offset=6, length=5)
    msg = await bot.send_message(42, "Hello world 👋", entities=[bold])
    assert msg.text == "Hello world 👋" and msg.chat.id == 42 and msg.entities == (bold,)
    call_ = tg.calls_to("sendMessage")[0]
    assert call_.params["chat_id"] == 42
    assert call_.params["entities"] == [{"type": "bold", "offset": 6, "length": 5}]

    second = await bot.send_message(42, "draft")
    assert second.message_id == msg.message_id + 1
    edited = await bot.edit_message_text("final", chat_id=42, message_id=second.message_id)
    assert isinstance(edited, telegram.Message) and edited.text == "final"
    assert tg.sent_texts(42) == ["Hello world 👋", "final"]

    with pytest.raises(BadRequest, match=r"(?i)message is not modified"):
        await bot.edit_message_text("final", chat_id=42, message_id=second.message_id)
    with pytest.raises(BadRequest, match=r"(?i)message to edit not found"):
        await bot.edit_message_text("x", chat_id=42, message_id=999)


@pytest.mark.filterwarnings("ignore::telegram.warnings.PTBDeprecationWarning")
async def test_faults_and_validation(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """Scripted 429/502/400 errors map to the right PTB exceptions; Telegram-like validation."""
    tg.fail_next("sendMessage", error="retry_after", retry_after=3)
    with pytest.raises(RetryAfter) as exc_info:
        await bot.send_message(1, "hi")
    assert exc_info.value.retry_after in (3, dtm.timedelta(seconds=3))  # int now, timedelta in PTB 23

    tg.fail_next("sendMessage", error="bad_gateway")
    with pytest.raises(NetworkError, match="Bad Gateway"):
        await bot.send_message(1, "hi")

    tg.fail_next("sendMessage", error="cant_parse")
    with pytest.raises(BadRequest, match=r"(?i)can't parse entities"):
        await bot.send_message(1, "hi")

    tg.fail_when("sendMessage", lambda p: "entities" in p, error="cant_parse")
    with pytest.raises(BadRequest):
        await bot.send_message(1, "bold", entities=[MessageEntity("bold", 0, 4)])
    assert (await bot.send_message(1, "plain")).text == "plain"
    tg.clear_faults()

    with pytest.raises(BadRequest, match=r"(?i)message is too long"):
        await bot.send_message(1, "😀" * 2049)  # 4098 UTF-16 code units
    assert (await bot.send_message(1, "😀" * 2048)).text  # exactly 4096
    with pytest.raises(BadRequest, match=r"(?i)message text is empty"):
        await bot.send_message(1, "   ")
    with pytest.raises(BadRequest, match=r"(?i)can't parse entities"):
        await bot.send_message(1, "Hi.", parse_mode="MarkdownV2")
    assert (await bot.send_message(1, "*Hi*\\. `a.b`", parse_mode="MarkdownV2")).text

    assert [c.status for c in tg.calls_to("sendMessage")][:4] == [429, 502, 400, 400]
    assert tg.sent_texts(1) == ["plain", "😀" * 2048, "*Hi*\\. `a.b`"]


async def test_uploads_over_50_mb_are_refused_as_telegram_does(tg: FakeTelegram, bot: telegram.Bot) -> None:
    from tests.support.fakes.telegram_api import UPLOAD_LIMIT, UploadedFile

    sent = await bot.send_document(42, document=b"x" * UPLOAD_LIMIT, filename="limit.bin", write_timeout=60)
    assert sent.document is not None and sent.document.file_size == UPLOAD_LIMIT
    with pytest.raises(telegram.error.TelegramError, match="Request Entity Too Large"):
        await bot.send_document(42, document=b"x" * (UPLOAD_LIMIT + 1), filename="over.bin", write_timeout=60)
    stored = [c.params["document"] for c in tg.calls_to("sendDocument") if c.ok]
    assert [d.filename for d in stored if isinstance(d, UploadedFile)] == ["limit.bin"]


async def test_hang_makes_ptb_time_out(tg: FakeTelegram) -> None:
    """A hung call surfaces as TimedOut in PTB while the server still processes it afterwards."""
    request = telegram.request.HTTPXRequest(read_timeout=0.2)
    async with telegram.Bot(TOKEN, base_url=tg.base_url, request=request) as b:
        tg.fail_next("sendMessage", error="hang", hang=0.5)
        with pytest.raises(TimedOut):
            await b.send_message(5, "slow")
    await tg.wait_for_call("sendMessage", chat_id=5)
    assert tg.sent_texts(5) == ["slow"]


async def test_commands_document_and_misc(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """setMyCommands/getMyCommands, multipart sendDocument, chat actions and generic methods."""
    await bot.set_my_commands([("start", "Start"), ("help", "Help")])
    assert [c.command for c in await bot.get_my_commands()] == ["start", "help"]
    assert await bot.delete_my_commands()
    assert await bot.get_my_commands() == ()

    doc = await bot.send_document(7, document=b"hello file", filename="notes.txt", caption="here")
    assert doc.document is not None and doc.document.file_name == "notes.txt" and doc.caption == "here"
    uploaded = tg.calls_to("sendDocument")[0].params["document"]
    assert uploaded.data == b"hello file" and uploaded.filename == "notes.txt"

    assert await bot.send_chat_action(7, "typing")
    assert await bot.set_my_description("desc")  # generic method
    assert tg.calls_to("setMyDescription")[0].params["description"] == "desc"
    info = await bot.get_webhook_info()
    assert info.url == ""

    tg.push_photo(7)
    tg.push_sticker(7)
    updates = await bot.get_updates(timeout=0)
    assert updates[0].message is not None and updates[0].message.photo
    file = await bot.get_file(updates[0].message.photo[-1].file_id)
    assert bytes(await file.download_as_bytearray()).startswith(b"\xff\xd8")
    assert updates[1].message is not None and updates[1].message.sticker is not None


@pytest.mark.filterwarnings("ignore::telegram.warnings.PTBUserWarning")  # do_api_request for bad scopes
async def test_command_scopes_and_descriptions(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """Command lists per scope and language, chosen as the Bot API documents; descriptions per language."""
    from telegram import (
        BotCommandScopeAllChatAdministrators,
        BotCommandScopeAllGroupChats,
        BotCommandScopeAllPrivateChats,
        BotCommandScopeChat,
        BotCommandScopeChatMember,
    )

    await bot.set_my_commands([("start", "Start")])
    await bot.set_my_commands([("help", "Help")], scope=BotCommandScopeAllPrivateChats())
    await bot.set_my_commands([("budget", "Caps")], scope=BotCommandScopeChat(7))
    private = BotCommandScopeAllPrivateChats()
    await bot.set_my_commands([("hilfe", "Hilfe")], scope=private, language_code="de")
    assert tg.commands_for(7, 7) == ["budget"]  # the chat's own list first
    assert tg.commands_for(8, 8) == ["help"] and tg.commands_for(8, 8, language="de") == ["hilfe"]
    assert tg.commands_for(-5, 8, group=True) == ["start"]  # no group scope set: the default
    await bot.set_my_commands([("model", "Model")], scope=BotCommandScopeAllGroupChats())
    await bot.set_my_commands([("ban", "Ban")], scope=BotCommandScopeAllChatAdministrators())
    await bot.set_my_commands([("mine", "Mine")], scope=BotCommandScopeChatMember(-5, 9))
    assert tg.commands_for(-5, 8, group=True) == ["model"]
    assert tg.commands_for(-5, 8, group=True, admin=True) == ["ban"]
    assert tg.commands_for(-5, 9, group=True, admin=True) == ["mine"]
    assert [c.command for c in await bot.get_my_commands(scope=BotCommandScopeChat(7))] == ["budget"]
    await bot.set_my_commands([], scope=BotCommandScopeChat(7))  # an empty list removes it
    assert tg.commands_for(7, 7) == ["help"]
    for bad in ([("Start", "x")], [("start", "")], [("a" * 33, "x")]):
        with pytest.raises(BadRequest):
            await bot.set_my_commands(bad)
    with pytest.raises(BadRequest, match=r"(?i)chat_id is empty"):
        await bot.do_api_request("setMyCommands", {"commands": [], "scope": {"type": "chat"}})
    with pytest.raises(BadRequest, match=r"(?i)invalid scope"):
        await bot.do_api_request("setMyCommands", {"commands": [], "scope": {"type": "everyone"}})

    assert (await bot.get_my_description()).description == ""
    assert await bot.set_my_description("An assistant.")
    assert await bot.set_my_short_description("Short.", language_code="de")
    assert (await bot.get_my_description()).description == "An assistant."
    assert (await bot.get_my_short_description()).short_description == ""
    assert (await bot.get_my_short_description(language_code="de")).short_description == "Short."
    with pytest.raises(BadRequest):
        await bot.set_my_short_description("x" * 121)
    assert await bot.set_my_description("")  # removes it
    assert tg.descriptions == {} and tg.short_descriptions == {"de": "Short."}


async def test_long_polling_returns_on_push(tg: FakeTelegram, bot: telegram.Bot) -> None:
    """getUpdates blocks until an update is pushed, and offset confirms updates."""
    task = asyncio.create_task(bot.get_updates(timeout=5))
    await asyncio.sleep(0.1)
    assert not task.done()
    update_id = tg.push_text(9, "/start deep")
    (update,) = await asyncio.wait_for(task, 2)
    assert update.update_id == update_id and update.message is not None
    assert update.message.text == "/start deep"
    assert update.message.entities[0].type == "bot_command" and update.message.entities[0].length == 6
    assert update.message.chat.type == "private" and update.message.chat.id == 9
    assert await bot.get_updates(offset=update_id + 1, timeout=0) == ()


async def test_application_polling_flow(tg: FakeTelegram) -> None:
    """A PTB Application receives a pushed update through real long polling and replies."""
    app = Application.builder().token(TOKEN).base_url(tg.base_url).build()

    async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.effective_message is not None and update.effective_chat is not None
        await context.bot.send_message(update.effective_chat.id, f"echo: {update.effective_message.text}")

    app.add_handler(MessageHandler(filters.TEXT, echo))
    async with app:
        await app.start()
        assert app.updater is not None
        await app.updater.start_polling(poll_interval=0, timeout=dtm.timedelta(seconds=1))
        tg.push_text(1001, "hello", first_name="Bob", username="bob")
        await tg.wait_for_call("sendMessage", chat_id=1001)
        await app.updater.stop()
        await app.stop()
    assert tg.sent_texts(1001) == ["echo: hello"]


# ---------------------------------------------------------------- OpenAI


async def test_stream_text_with_usage(llm: FakeLLM, client: openai.AsyncOpenAI) -> None:
    """Streaming text reassembles; the usage chunk arrives when include_usage is requested."""
    llm.script(text("Hello **world**", chunk_size=4))
    stream = await client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    parts: list[str] = []
    usage = None
    finish = None
    async for chunk in stream:
        if chunk.choices:
            parts.append(chunk.choices[0].delta.content or "")
            finish = chunk.choices[0].finish_reason or finish
        if chunk.usage is not None:
            usage = chunk.usage
    assert "".join(parts) == "Hello **world**" and finish == "stop"
    assert usage is not None and usage.completion_tokens > 0 and usage.prompt_tokens > 0
    assert llm.requests[0]["stream_options"] == {"include_usage": True}


async def test_stream_tool_calls(llm: FakeLLM, client: openai.AsyncOpenAI) -> None:
    """Tool-call deltas reassemble into names/arguments, including deliberately broken JSON."""
    llm.script(tool_calls(call("search", {"q": "weather in Paris"}), call("other", '{"raw json')))
    tools: Any = [{"type": "function", "function": {"name": "search", "parameters": {"type": "object"}}}]
    stream = await client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True, tools=tools
    )
    calls: dict[int, dict[str, str]] = {}
    finish = None
    deltas = 0
    async for chunk in stream:
        assert chunk.usage is None  # include_usage not requested
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for tc in choice.delta.tool_calls or []:
                deltas += 1
                entry = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                entry["id"] += tc.id or ""
                if tc.function is not None:
                    entry["name"] += tc.function.name or ""
                    entry["arguments"] += tc.function.arguments or ""
    assert finish == "tool_calls" and deltas > 4
    assert calls[0] == {"id": "call_1", "name": "search", "arguments": json.dumps({"q": "weather in Paris"})}
    assert calls[1]["name"] == "other" and calls[1]["arguments"] == '{"raw json'
    assert llm.requests[0]["tools"] == tools


async def test_errors_and_non_stream(llm: FakeLLM, client: openai.AsyncOpenAI) -> None:
    """error() raises the SDK's status errors; non-stream replies, default reply, models, embeddings."""
    llm.script(
        error(500),
        error(429, headers={"retry-after": "1"}),
        text("plain reply"),
        tool_calls(call("f", {"a": 1})),
        lambda req: text(f"echo {req['messages'][-1]['content']}"),
        stream_error("partial"),
    )
    msgs: Any = [{"role": "user", "content": "yo"}]
    with pytest.raises(openai.InternalServerError):
        await client.chat.completions.create(model="m", messages=msgs)
    with pytest.raises(openai.RateLimitError) as rl:
        await client.chat.completions.create(model="m", messages=msgs)
    assert rl.value.response.headers["retry-after"] == "1"

    done = await client.chat.completions.create(model="m", messages=msgs)
    assert done.choices[0].message.content == "plain reply" and done.usage is not None
    tc = await client.chat.completions.create(model="m", messages=msgs)
    assert tc.choices[0].finish_reason == "tool_calls"
    assert tc.choices[0].message.tool_calls is not None
    fn = tc.choices[0].message.tool_calls[0]
    assert isinstance(fn, openai.types.chat.ChatCompletionMessageFunctionToolCall)
    assert (fn.function.name, json.loads(fn.function.arguments)) == ("f", {"a": 1})
    echoed = await client.chat.completions.create(model="m", messages=msgs)
    assert echoed.choices[0].message.content == "echo yo"
    with pytest.raises(openai.APIError, match="error while processing"):
        async for _ in await client.chat.completions.create(model="m", messages=msgs, stream=True):
            pass
    default = await client.chat.completions.create(model="m", messages=msgs)
    assert default.choices[0].message.content == "ok"
    assert len(await llm.wait_for_requests(7)) == 7

    assert [m.id async for m in client.models.list()] == llm.models
    emb = await client.embeddings.create(model="e", input=["a", "b"])
    assert len(emb.data) == 2 and len(emb.data[0].embedding) == llm.embedding_dim
    again = await client.embeddings.create(model="e", input="a", encoding_format="float")
    assert again.data[0].embedding == pytest.approx(emb.data[0].embedding, abs=1e-6)


async def test_hang_times_out_and_concurrency(llm: FakeLLM) -> None:
    """hang() trips the client timeout; 50 concurrent streams are served in parallel."""
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0, timeout=0.3) as c:
        llm.script(hang(5))
        with pytest.raises(openai.APITimeoutError):
            await c.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])

    llm.delay = 0.2
    llm.default = text("concurrent reply", chunk_size=3)
    async with openai.AsyncOpenAI(base_url=llm.base_url, api_key="test", max_retries=0) as c:

        async def one(i: int) -> str:
            stream = await c.chat.completions.create(
                model="m", messages=[{"role": "user", "content": str(i)}], stream=True
            )
            return "".join([ch.choices[0].delta.content or "" async for ch in stream if ch.choices])

        results = await asyncio.gather(*(one(i) for i in range(50)))
    assert results == ["concurrent reply"] * 50
    assert llm.max_active > 10  # served side by side (each waits its delay): parallel, not a queue


async def test_a_held_stream_ends_only_when_released_and_sees_a_client_leave(
    llm: FakeLLM, client: openai.AsyncOpenAI
) -> None:
    """text(hold=event): the content streams at once, the stream stays open (comments the client skips)
    until the event is set; a client closing it meanwhile is counted as a disconnect."""
    release = asyncio.Event()
    llm.script(text("partial", hold=release), text("cut off", hold=asyncio.Event()))
    stream = await client.chat.completions.create(model="m", messages=[], stream=True)
    parts: list[str] = []
    finish: str | None = None

    async def read() -> None:
        nonlocal finish
        async for chunk in stream:
            if chunk.choices:
                parts.append(chunk.choices[0].delta.content or "")
                finish = chunk.choices[0].finish_reason or finish

    reading = asyncio.create_task(read())
    await asyncio.wait_for(_until(lambda: "".join(parts) == "partial"), 30)
    assert not reading.done() and finish is None  # held open after its content
    release.set()
    await asyncio.wait_for(reading, 30)
    assert "".join(parts) == "partial" and finish == "stop"

    held = await client.chat.completions.create(model="m", messages=[], stream=True)
    async for chunk in held:
        if chunk.choices and chunk.choices[0].delta.content:
            break
    await held.close()  # as a stopped turn closes its stream
    await asyncio.wait_for(_until(lambda: llm.disconnects == 1), 30)


async def _until(done: Any) -> None:
    """Poll `done()` until it is true (callers bound the wait)."""
    while not done():
        await asyncio.sleep(0.01)
