"""The chat backbone end to end: real PTB and openai clients against loopback fakes, real SQLite."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

from core_tools.registry import MAX_DESCRIPTION_CHARS
from core_tools.types import ToolContext
from db.models import LLMCall, Message, ToolCallLog
from tests.support.fakes.openai_api import FakeLLM, Step, call, error, hang, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, STRANGER, register_math, rows, running_bot


async def test_stranger_is_refused_with_their_id_and_no_llm_call(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(STRANGER, "hello, who are you?")
        refusal = await h.final_text(STRANGER, "not on its list")
        assert str(STRANGER) in refusal
        assert llm.requests == []


async def test_plain_reply_is_formatted_and_stored(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    llm.script(text("Hello **world**, 2 < 3"))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "hi")
        await h.final_text(OWNER, "Hello world, 2 < 3")
        msg = tg.last_message(OWNER)
        assert {"type": "bold", "offset": 6, "length": 5} in [
            {k: e[k] for k in ("type", "offset", "length")} for e in msg.get("entities", [])
        ]
        system = llm.requests[0]["messages"][0]
        assert system["role"] == "system" and "Current date and time" in system["content"]
        stored = rows(h, Message)
        assert [(m["role"], m["status"]) for m in stored] == [("user", "answered"), ("assistant", "done")]
        calls = rows(h, LLMCall)
        assert calls[0]["purpose"] == "chat" and calls[0]["prompt_tokens"] > 0 and calls[0]["error"] is None


async def test_start_help_and_unsupported_messages(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "/start")
        greeting = await h.final_text(OWNER, "Hello, Ann")
        assert "/newsession" in greeting and "/help" in greeting
        tg.push_sticker(OWNER)
        await h.final_text(OWNER, "are not supported")
        assert llm.requests == []
        commands = tg.calls_to("setMyCommands")
        assert commands and "newsession" in json.dumps(commands[0].params)


async def test_tool_round_trip(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    llm.script(tool_calls(call("add", {"a": 2, "b": 3})), text("The sum is 5."))
    async with running_bot(tmp_path, tg, llm, setup=register_math) as h:
        tg.push_text(OWNER, "what is 2+3?")
        await h.final_text(OWNER, "The sum is 5.")
        first, second = llm.requests
        tools = {t["function"]["name"]: t["function"] for t in first["tools"]}
        assert {"add", "search", "fetch"} <= set(tools)
        # The whole docstring guidance reaches the model, not only its first paragraph, within the bound.
        assert "Write, run or check code" in tools["code"]["description"]
        assert "The program prints its result to stdout." in tools["code"]["description"]
        assert all(len(t["description"]) <= MAX_DESCRIPTION_CHARS for t in tools.values())
        params = tools["add"]["parameters"]
        assert params["required"] == ["a"] and params["properties"]["a"]["description"] == "first"
        tool_msg = second["messages"][-1]
        assert tool_msg["role"] == "tool" and json.loads(tool_msg["content"]) == {"sum": 5}
        logged = rows(h, ToolCallLog)
        assert logged[0]["tool"] == "add" and logged[0]["ok"]


async def test_parallel_tool_calls_run_concurrently_and_keep_order(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    both_started = asyncio.Event()
    running = 0

    async def wait_both(ctx: ToolContext, tag: str) -> str:
        """Wait until two calls run at once."""
        nonlocal running
        running += 1
        if running == 2:
            both_started.set()
        await asyncio.wait_for(both_started.wait(), timeout=60)  # deadlocks if calls were sequential
        return tag if tag == "first" else tag.upper()

    def setup(services: object) -> None:
        services.registry.register(wait_both)  # type: ignore[attr-defined]

    llm.script(
        tool_calls(
            call("wait_both", {"tag": "first"}, id="c1"), call("wait_both", {"tag": "second"}, id="c2")
        ),
        text("done"),
    )
    async with running_bot(tmp_path, tg, llm, setup=setup) as h:
        tg.push_text(OWNER, "go")
        await h.final_text(OWNER, "done")
        results = [
            (m["tool_call_id"], m["content"]) for m in llm.requests[1]["messages"] if m["role"] == "tool"
        ]
        assert results == [("c1", "first"), ("c2", "SECOND")]


async def test_chain_limit_forces_a_final_answer_without_tools(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(
        tool_calls(call("add", {"a": 1})),
        tool_calls(call("add", {"a": 2})),
        text("Here is what I found so far."),
    )
    async with running_bot(tmp_path, tg, llm, setup=register_math, max_tool_rounds=2) as h:
        tg.push_text(OWNER, "loop please")
        final = await h.final_text(OWNER, "Here is what I found so far.")
        assert "limit of tool calls" in final
        assert "tools" not in llm.requests[2]
        assert "limit for this message is reached" in llm.requests[2]["messages"][-1]["content"]


async def test_repeated_identical_call_is_not_run_again(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(
        tool_calls(call("add", {"a": 1, "b": 1})),
        tool_calls(call("add", {"b": 1, "a": 1})),
        text("It is 2."),
    )
    async with running_bot(tmp_path, tg, llm, setup=register_math) as h:
        tg.push_text(OWNER, "1+1")
        final = await h.final_text(OWNER, "It is 2.")
        assert "repeating the same call" in final
        assert len([r for r in rows(h, ToolCallLog) if r["tool"] == "add"]) == 1
        assert "already made" in llm.requests[2]["messages"][-2]["content"]


async def test_invalid_tool_arguments_go_back_to_the_model(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(
        tool_calls(call("add", {"a": "not a number"}), call("nope", {}), call("add", '{"a": 1,')),
        text("Sorry, let me fix that."),
    )
    async with running_bot(tmp_path, tg, llm, setup=register_math) as h:
        tg.push_text(OWNER, "add stuff")
        await h.final_text(OWNER, "Sorry, let me fix that.")
        errors = [
            json.loads(m["content"])["error"] for m in llm.requests[1]["messages"] if m["role"] == "tool"
        ]
        assert "invalid arguments for add" in errors[0] and "a:" in errors[0]
        assert "unknown tool 'nope'" in errors[1] and "add" in errors[1]
        assert "not valid JSON" in errors[2]


async def test_llm_500_then_success_is_retried(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    llm.script(error(500), text("recovered"))
    async with running_bot(tmp_path, tg, llm, llm_max_retries=2) as h:
        tg.push_text(OWNER, "hi")
        await h.final_text(OWNER, "recovered")
        assert len(llm.requests) == 2


async def test_llm_down_explains_keeps_the_message_and_keeps_serving(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(error(503), text("back again"))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "are you there?")
        apology = await h.final_text(OWNER, "could not get an answer")
        assert "HTTP 503" in apology and "saved" in apology
        tg.push_text(OWNER, "and now?")
        await h.final_text(OWNER, "back again")
        users = [(m["content"], m["status"]) for m in rows(h, Message) if m["role"] == "user"]
        assert users == [("are you there?", "failed"), ("and now?", "answered")]
        # The unanswered message is still part of the conversation the model sees.
        assert [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "user"] == [
            "are you there?",
            "and now?",
        ]


async def test_edit_429_pauses_and_the_final_text_still_arrives(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    words = " ".join(f"word{i}" for i in range(60))
    llm.script(text(words, chunk_size=8, chunk_delay=0.02))
    tg.fail_next("editMessageText", times=2, error="retry_after", retry_after=1)
    async with running_bot(tmp_path, tg, llm, stream_edit_interval_s=0.05) as h:
        tg.push_text(OWNER, "talk")
        await h.final_text(OWNER, words)
        failed = [c for c in tg.calls_to("editMessageText") if not c.ok]
        assert len(failed) == 2
        assert len(tg.messages[OWNER]) == 1  # the preview became the answer


async def test_streaming_edits_are_throttled(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    words = " ".join(f"w{i}" for i in range(200))
    llm.script(text(words, chunk_size=4, chunk_delay=0.005))  # about 1.3 s of streaming
    async with running_bot(tmp_path, tg, llm, stream_edit_interval_s=0.5) as h:
        tg.push_text(OWNER, "stream")
        await h.final_text(OWNER, words)
        updates = tg.calls_to("sendMessage") + tg.calls_to("editMessageText")
        stamps = sorted(c.time for c in updates)
        previews = stamps[:-1]  # the last one is the final formatted text, which is never held back
        gaps = [b - a for a, b in itertools.pairwise(previews)]
        assert all(g >= 0.45 for g in gaps), gaps
        assert len(updates) < 10


async def test_long_reply_is_split_without_breaking_code(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    code = "\n".join(f"print('line {i}')" for i in range(400))
    answer = "Intro paragraph.\n\n```python\n" + code + "\n```\n\nThe end."
    llm.script(text(answer, chunk_size=500))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "long code please")
        await h.final_text(OWNER, "The end.")
        msgs = tg.messages[OWNER]
        assert len(msgs) >= 2
        for m in msgs:
            assert len(m["text"]) <= 4096
            pres = [e for e in m.get("entities", []) if e["type"] == "pre"]
            assert pres, "every part carries its code as a code block"
        joined = "".join(m["text"] for m in msgs)
        assert all(f"print('line {i}')" in joined for i in range(400))


async def test_formatting_rejected_falls_back_to_plain_text(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("**Bold** answer"))
    tg.fail_when("editMessageText", lambda p: bool(p.get("entities")), error="cant_parse")
    tg.fail_when("sendMessage", lambda p: bool(p.get("entities")), error="cant_parse")
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "hi")
        await h.final_text(OWNER, "Bold answer")
        assert not tg.last_message(OWNER).get("entities")


async def test_restart_keeps_history(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    llm.script(text("Nice to meet you, Bob."))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "My name is Bob.")
        await h.final_text(OWNER, "Nice to meet you")
    llm.script(text("You are Bob."))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "What is my name?")
        await h.final_text(OWNER, "You are Bob.")
        history = [(m["role"], m["content"]) for m in llm.requests[-1]["messages"][1:]]
        assert history == [
            ("user", "My name is Bob."),
            ("assistant", "Nice to meet you, Bob."),
            ("user", "What is my name?"),
        ]


async def test_two_chats_run_in_parallel_while_one_chat_stays_ordered(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async def answer(req: dict[str, Any]) -> Step:
        last = [m["content"] for m in req["messages"] if m["role"] == "user"][-1]
        if last == "owner one":
            # Answered once the friend's turn is at the model too: the two chats' turns overlap by
            # construction, not because the owner's answers happened to last long enough.
            for _ in range(6000):
                if any(r["messages"][-1]["content"] == "friend one" for r in llm.requests):
                    break
                await asyncio.sleep(0.01)
        return text(f"re: {last}")

    llm.script(answer, answer, answer)
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "owner one")
        tg.push_text(OWNER, "owner two")
        tg.push_text(FRIEND, "friend one")
        await h.final_text(OWNER, "re: owner two")
        await h.final_text(FRIEND, "re: friend one")
        assert (
            llm.max_active == 2
        )  # the friend's turn ran beside the owner's; the owner's two did not overlap
        second = next(r for r in llm.requests if r["messages"][-1]["content"] == "owner two")
        assert ("assistant", "re: owner one") in [(m["role"], m["content"]) for m in second["messages"]]


async def test_newsession_starts_a_fresh_history_and_carries_a_summary(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("first answer"), text("- The user asked about the old topic."), text("fresh answer"))
    async with running_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "old topic")
        await h.final_text(OWNER, "first answer")
        tg.push_text(OWNER, "/newsession Holiday plans")
        started = await h.final_text(OWNER, "Started a new session: Holiday plans")
        assert "The user asked about the old topic." in started
        summary_request = llm.requests[1]
        assert (
            "tools" not in summary_request and "user: old topic" in summary_request["messages"][1]["content"]
        )
        tg.push_text(OWNER, "new topic")
        await h.final_text(OWNER, "fresh answer")
        last = llm.requests[-1]["messages"]
        assert [m["content"] for m in last[1:]] == ["new topic"]
        assert "The user asked about the old topic." in last[0]["content"]  # carried forward in the prompt
        summaries = await h.services.memory.recall(OWNER, "old topic", layer="short")
        assert summaries and 'session "Session' in summaries[0]["content"]


async def test_failing_non_essential_calls_are_ignored(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    tg.fail_when("sendChatAction", lambda p: True, error="bad_gateway")
    tg.fail_next("setMyCommands", error="server_error")
    llm.script(text("still here"))
    async with running_bot(tmp_path, tg, llm, typing_delay_s=0) as h:
        tg.push_text(OWNER, "hi")
        await h.final_text(OWNER, "still here")
        assert tg.calls_to("sendChatAction") and not tg.calls_to("sendChatAction")[0].ok


async def test_typing_shows_only_when_the_answer_takes_a_while(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("at once"), text("after a while", delay=2.0))
    # An answer that comes before TYPING_DELAY_S has passed: the chat is spared "typing...".
    async with running_bot(tmp_path / "quick", tg, llm, typing_delay_s=10) as h:
        tg.push_text(OWNER, "quick one")
        await h.final_text(OWNER, "at once")
    assert not tg.calls_to("sendChatAction")
    before = len(tg.calls)
    # One that takes longer (2 s before its first word): "typing..." shows while the user waits.
    async with running_bot(tmp_path / "slow", tg, llm, typing_delay_s=0.2) as h:
        tg.push_text(OWNER, "slow one")
        await h.final_text(OWNER, "after a while")
    actions = tg.calls_to("sendChatAction")
    assert [(c.params["chat_id"], c.params["action"]) for c in actions] == [(OWNER, "typing")]
    answer = next(c for c in tg.calls[before:] if c.method == "sendMessage" and c.params["chat_id"] == OWNER)
    assert actions[0].time < answer.time


async def test_llm_timeout_gets_a_short_explanation(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    llm.script(hang(5))
    async with running_bot(tmp_path, tg, llm, llm_timeout_s=0.5) as h:
        tg.push_text(OWNER, "slow question")
        apology = await h.final_text(OWNER, "could not get an answer")
        assert "did not answer in time" in apology
