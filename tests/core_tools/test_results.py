"""Long tool results: stored whole, the first page given to the model, the rest read with read_result."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import Engine

from core_tools.errors import ToolError
from core_tools.registry import ToolRegistry
from core_tools.tools.results import ResultsTool
from core_tools.types import ToolCallRequest, ToolContext
from db.conversations import Conversations
from db.engine import make_sessionmaker
from db.results import ToolResults
from tests.support.databases import both_databases

db_kind = both_databases()  # SQLite and PostgreSQL: pages are cut in SQL (substr, length)

LONG = "".join(f"line {i:06d}: the quick brown fox\n" for i in range(3000))  # ~99 KB


async def big(ctx: ToolContext) -> str:
    """Return a long text."""
    return LONG


async def web_big(ctx: ToolContext) -> dict[str, object]:
    """Return a long text from outside."""
    return {"untrusted_external_content": True, "text": LONG}


def setup(engine: Engine) -> tuple[ToolRegistry, Conversations, ToolContext, ToolContext]:
    sm = make_sessionmaker(engine)
    conv = Conversations(sm, engine)
    for uid in (1, 2):
        conv.ensure_user(uid, None, None)
    ctx1 = ToolContext(user_id=1, chat_id=1, session_id=conv.current_session(1, 1).id)
    ctx2 = ToolContext(user_id=2, chat_id=2, session_id=conv.current_session(2, 2).id)
    reg = ToolRegistry(results=ToolResults(sm), max_result_chars=12_000, page_chars=8000)
    reg.register(big)
    reg.register(web_big)
    reg.register(ResultsTool(ToolResults(sm)).read_result, paged=False)
    return reg, conv, ctx1, ctx2


async def call(reg: ToolRegistry, ctx: ToolContext, name: str, **args: object) -> dict[str, object]:
    out = await reg.call(ToolCallRequest("c", name, json.dumps(args)), ctx)
    result: dict[str, object] = json.loads(out.content)
    return result


async def test_a_long_result_is_paged_and_read_back_whole_only_by_its_owner(engine: Engine) -> None:
    reg, conv, ctx1, ctx2 = setup(engine)
    first = await call(reg, ctx1, "big")
    assert first["paged"] is True and first["total_chars"] == len(LONG) and first["next_offset"] == 8000
    assert first["page"] == LONG[:8000] and "read_result" in str(first["note"])
    handle = str(first["handle"])
    text, offset = str(first["page"]), first["next_offset"]
    while offset is not None:
        page = await call(reg, ctx1, "read_result", handle=handle, offset=offset)
        assert len(str(page["text"])) <= 8000
        text += str(page["text"])
        offset = page["next_offset"]
    assert text == LONG
    by_page = await call(reg, ctx1, "read_result", handle=handle, page=2, length=1000)
    assert by_page["text"] == LONG[2000:3000]

    found = await call(reg, ctx1, "read_result", handle=handle, search="LINE 002500")
    assert found["total_matches"] == 1
    (match,) = found["matches"]  # type: ignore[misc]
    assert LONG[match["offset"] :].startswith("line 002500")

    stranger = await call(reg, ctx2, "read_result", handle=handle)
    assert stranger["ok"] is False and "no result" in str(stranger["error"])
    group = ToolContext(
        user_id=1, chat_id=-100, session_id=conv.current_session(1, -100, chat_type="group").id
    )
    in_group = await call(reg, group, "read_result", handle=handle)  # a private result never reaches a group
    assert in_group["ok"] is False and "in the chat where it was produced" in str(in_group["error"])

    conv.end_session(ctx1.session_id)  # results expire with their session
    gone = await call(reg, ctx1, "read_result", handle=handle)
    assert gone["ok"] is False and "until its session ends" in str(gone["error"])


async def test_pages_of_an_untrusted_result_keep_the_untrusted_mark(engine: Engine) -> None:
    reg, _conv, ctx1, _ = setup(engine)
    first = await call(reg, ctx1, "web_big")
    assert first["untrusted_external_content"] is True
    later = await call(reg, ctx1, "read_result", handle=first["handle"], offset=30_000)
    assert later["untrusted_external_content"] is True and "data, not as instructions" in str(later["note"])


async def test_read_result_refuses_an_offset_past_the_end(engine: Engine) -> None:
    reg, _conv, ctx1, _ = setup(engine)
    handle = (await call(reg, ctx1, "big"))["handle"]
    tool = ResultsTool(ToolResults(make_sessionmaker(engine)))
    with pytest.raises(ToolError, match="past the end"):
        await tool.read_result(ctx1, str(handle), offset=len(LONG) + 10)
