"""Large results through the whole bot: a scripted model reads a 200 KB code output and a long page whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.fakes.openai_api import FakeLLM, Step, call, text, tool_calls
from tests.support.fakes.search import FakeServer, reply_text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, running_bot

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
