"""A search through the whole stack: the model calls `search`, fake SearXNG answers, the user sees a URL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.support.fakes.openai_api import FakeLLM, Step, call, text, tool_calls
from tests.support.fakes.search import FakeServer, reply_json, searxng_payload, searxng_result
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, running_bot


async def test_search_turn_answers_with_a_url(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    searx = FakeServer()
    await searx.start()
    searx.on(
        "GET",
        "/search",
        reply_json(
            searxng_payload(
                [
                    searxng_result(
                        "https://www.python.org/downloads/?utm_source=x", "Python 3.14", "<b>New</b>"
                    )
                ]
            )
        ),
    )

    def answer(request: dict[str, Any]) -> Step:
        result = json.loads(request["messages"][-1]["content"])
        url = result["results"][0]["url"]
        return text(f"The newest release is described at {url}")

    llm.script(tool_calls(call("search", {"query": "latest python release"})), answer)
    try:
        async with running_bot(tmp_path, tg, llm, searxng_url=searx.base_url, stream_edit_interval_s=0) as h:
            tg.push_text(OWNER, "What is the latest Python?")
            await h.final_text(OWNER, "https://www.python.org/downloads/")
            assert any("searching: latest python release" in str(c.params.get("text")) for c in tg.calls)
            tool_result = json.loads(llm.requests[1]["messages"][-1]["content"])
            assert tool_result["untrusted_external_content"] is True
            assert tool_result["results"][0]["snippet"] == "New"
            assert searx.requests[0].query["format"] == "json"
    finally:
        await searx.close()
