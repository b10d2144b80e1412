"""A tool round larger than the history budget: the question and every result still reach the model."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.fakes.openai_api import FakeLLM, call, text, tool_calls
from tests.support.fakes.search import FakeServer, reply_text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, running_bot

BUDGET = 3000  # tokens; three fetches of 20,000 characters are about 15,000


async def test_three_large_fetches_keep_the_question_and_every_result(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    pages = FakeServer()
    await pages.start()
    for name in ("alpha", "beta", "gamma"):
        pages.on("GET", f"/{name}", reply_text(f"{name.upper()}-PAGE " + "lorem ipsum " * 3000))
    ids = ["call_alpha", "call_beta", "call_gamma"]
    llm.script(
        tool_calls(
            *(
                call("fetch", {"url": f"{pages.base_url}/{name}", "max_chars": 20000}, id=cid)
                for name, cid in zip(("alpha", "beta", "gamma"), ids, strict=True)
            )
        ),
        text("All three pages are about lorem ipsum."),
        text("The first one was ALPHA."),
    )
    question = "Compare these three pages for me"
    try:
        async with running_bot(
            tmp_path,
            tg,
            llm,
            fetch_allow_private=True,
            history_token_budget=BUDGET,
            stream_edit_interval_s=0,
        ) as h:
            tg.push_text(OWNER, question)
            await h.final_text(OWNER, "All three pages are about lorem ipsum.")
            assert pages.count() == 3
            after_round = llm.requests[1]["messages"]
            assert [m["content"] for m in after_round if m["role"] == "user"] == [question]
            (asked,) = [m for m in after_round if m["role"] == "assistant"]
            assert [c["id"] for c in asked["tool_calls"]] == ids
            results = {m["tool_call_id"]: m["content"] for m in after_round if m["role"] == "tool"}
            assert list(results) == ids
            for cid, name in zip(ids, ("ALPHA", "BETA", "GAMMA"), strict=True):
                assert f"{name}-PAGE" in results[cid]  # each result keeps its beginning...
                assert "[cut: " in results[cid] and " characters]" in results[cid]  # ...and says it was cut
            history_chars = sum(len(json.dumps(m)) for m in after_round[1:])
            assert history_chars < BUDGET * 4 * 1.2  # about four characters a token, plus the JSON shape

            # The next message still has the earlier turn, its round shrunk, never split from its calls.
            tg.push_text(OWNER, "which one came first?")
            await h.final_text(OWNER, "The first one was ALPHA.")
            later = llm.requests[2]["messages"]
            roles = [m["role"] for m in later[1:]]
            assert roles == ["user", "assistant", "tool", "tool", "tool", "assistant", "user"]
            assert [m["content"] for m in later if m["role"] == "user"] == [question, "which one came first?"]
            assert [m["tool_call_id"] for m in later if m["role"] == "tool"] == ids
    finally:
        await pages.close()
