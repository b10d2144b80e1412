"""Large results through the whole bot: a scripted model reads a 200 KB code output and a long page whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.runtime.services import Services
from core_tools.types import ToolContext
from tests.support.fakes.openai_api import FakeLLM, Step, call, text, tool_calls
from tests.support.fakes.search import FakeServer, reply_text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, running_bot

PROGRAM = "for i in range(5000):\n    print(f'row {i:05d} ' + 'x' * 29)\n"
OUTPUT = "".join(f"row {i:05d} " + "x" * 29 + "\n" for i in range(5000))  # 200,000 characters


class Reader:
    """A model that reads a result to its end through read_result, then answers."""

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.rounds = 0

    def last_result(self, body: dict[str, Any]) -> dict[str, Any]:
        msg = body["messages"][-1]
        assert msg["role"] == "tool", msg
        result: dict[str, Any] = json.loads(msg["content"])
        return result

    def read_on(self, handle: str, offset: int | None) -> Step:
        self.rounds += 1
        if offset is None:
            return text(f"Read {sum(map(len, self.pieces))} characters.")
        return tool_calls(call("read_result", {"handle": handle, "offset": offset}))


async def test_a_200_kb_code_output_is_read_back_whole_by_execution_id(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    reader = Reader()
    state: dict[str, str] = {}

    def step(body: dict[str, Any]) -> Step:
        result = reader.last_result(body)
        if "execution_id" in result:  # the code result: stdout shown cut, the run's id to read it by
            assert len(result["stdout"]) < 5000 and "read_result" in result["stdout"]
            state["handle"] = result["execution_id"]
            return reader.read_on(state["handle"], 0)
        reader.pieces.append(result["text"])
        return reader.read_on(state["handle"], result["next_offset"])

    llm.script(tool_calls(call("code", {"action": "execute", "code": PROGRAM})), *[step] * 40)
    async with running_bot(tmp_path, tg, llm, max_tool_rounds=40) as h:
        tg.push_text(OWNER, "print the table")
        await h.final_text(OWNER, "Read 200000 characters.", timeout=60)
    assert "".join(reader.pieces) == OUTPUT
    assert reader.rounds == 26  # 25 pages of 8,000 characters, then the answer


async def test_a_long_page_is_read_back_whole_through_read_result_and_fetch_offset(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    page = "".join(f"paragraph {i:04d} of a long article about otters.\n" for i in range(700)).strip()
    site = FakeServer()
    base = await site.start()
    site.on("GET", "/long", reply_text(page))
    url = f"{base}/long"
    got: list[str] = []
    stored: list[str] = []
    state: dict[str, Any] = {}

    def step(body: dict[str, Any]) -> Step:
        result = json.loads(body["messages"][-1]["content"])
        if result.get("paged"):  # the fetch result was over a page: stored, its first page and handle given
            state["handle"] = result["handle"]
            stored.append(result["page"])
            return tool_calls(
                call("read_result", {"handle": result["handle"], "offset": result["next_offset"]})
            )
        if "handle" in result and "text" in result and result.get("tool") == "fetch":
            assert result["untrusted_external_content"] is True
            stored.append(result["text"])
            if result["next_offset"] is not None:
                return tool_calls(
                    call("read_result", {"handle": state["handle"], "offset": result["next_offset"]})
                )
            fetched = json.loads("".join(stored))
            stored.clear()
            got.append(fetched["text"])
            result = fetched
        else:
            got.append(result["text"])
        if result.get("next_offset") is None:
            return text(f"Read the page: {sum(map(len, got))} characters.")
        return tool_calls(call("fetch", {"url": url, "max_chars": 20000, "offset": result["next_offset"]}))

    llm.script(tool_calls(call("fetch", {"url": url, "max_chars": 20000})), *[step] * 20)
    try:
        async with running_bot(tmp_path, tg, llm, fetch_allow_private=True, max_tool_rounds=20) as h:
            tg.push_text(OWNER, "read this article")
            await h.final_text(OWNER, f"Read the page: {len(page)} characters.", timeout=60)
    finally:
        await site.close()
    assert "".join(got) == page and len(got) == 2


LOG = "".join(f"event {i:04d} status={'error' if i % 7 == 0 else 'ok'}\n" for i in range(1, 1501))  # ~33 KB


def register_log(services: Services) -> None:
    """A test-only tool that returns a long log (longer than a page: it is stored and given a handle)."""

    async def server_log(ctx: ToolContext) -> str:
        """Return the server's log."""
        return LOG

    services.registry.register(server_log)


async def test_a_result_is_read_by_lines_whole_within_a_limit_and_as_a_file_of_a_code_run(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    seen: list[dict[str, Any]] = []
    state: dict[str, str] = {}

    def result_of(body: dict[str, Any]) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(body["messages"][-1]["content"])
        seen.append(result)
        return result

    def after_log(body: dict[str, Any]) -> Step:
        state["handle"] = result_of(body)["handle"]
        return tool_calls(call("read_result", {"handle": state["handle"], "lines": "699:701"}))

    def after_lines(body: dict[str, Any]) -> Step:
        result_of(body)
        return tool_calls(call("read_result", {"handle": state["handle"], "whole_if_at_most": 1000}))

    def after_too_long(body: dict[str, Any]) -> Step:
        result_of(body)
        return tool_calls(call("read_result", {"handle": state["handle"], "whole_if_at_most": 40_000}))

    def after_whole(body: dict[str, Any]) -> Step:
        result_of(body)
        program = (
            f"rows = open('in/result-{state['handle']}.txt').read().splitlines()\n"
            "print(len(rows), sum('status=error' in r for r in rows))"
        )
        return tool_calls(call("code", {"action": "execute", "code": program, "results": [state["handle"]]}))

    def after_code(body: dict[str, Any]) -> Step:
        return text(f"The code saw: {result_of(body)['stdout'].strip()}")

    llm.script(
        tool_calls(call("server_log", {})), after_log, after_lines, after_too_long, after_whole, after_code
    )
    # A history budget of 20,000 tokens: read_result gives up to 40,000 characters whole.
    async with running_bot(tmp_path, tg, llm, setup=register_log, history_token_budget=20_000) as h:
        tg.push_text(OWNER, "how many errors are in the server log?")
        await h.final_text(OWNER, "The code saw: 1500 214")
    lines, too_long, whole = seen[1], seen[2], seen[3]
    assert lines["text"] == "event 0699 status=ok\nevent 0700 status=error\nevent 0701 status=ok\n"
    assert lines["lines"] == "699:701" and lines["total_lines"] == 1500 and lines["next_line"] == 702
    assert too_long["text"] == LOG[:8000] and "more than 1000" in too_long["not_whole"]
    assert too_long["next_offset"] == 8000
    assert whole["text"] == LOG and whole["next_offset"] is None


async def test_a_code_run_cannot_read_another_users_result(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    def after_log(body: dict[str, Any]) -> Step:
        handle = json.loads(body["messages"][-1]["content"])["handle"]
        return text(f"handle {handle}")

    llm.script(tool_calls(call("server_log", {})), after_log)
    async with running_bot(tmp_path, tg, llm, setup=register_log) as h:
        tg.push_text(OWNER, "fetch the log")
        handle = (await h.final_text(OWNER, "handle r-")).split()[-1]
        program = f"print(open('in/result-{handle}.txt').read()[:30])"
        llm.script(
            tool_calls(call("code", {"action": "execute", "code": program, "results": [handle]})),
            lambda body: text("friend got: " + json.loads(body["messages"][-1]["content"])["error"]),
        )
        tg.push_text(FRIEND, "read the owner's log")
        answer = await h.final_text(FRIEND, "friend got: ")
    assert f"no result {handle!r} for you here" in answer and "event 0001" not in answer
