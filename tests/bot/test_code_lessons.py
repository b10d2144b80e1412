"""Code runs that learn from their failures, through the whole bot: /codestats' examples, the code tool's
`failures` action and the lessons note in the code tool's description (issue 25, item 1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core_tools.types import ToolContext
from tests.support.databases import both_databases
from tests.support.fakes.openai_api import FakeLLM, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, Harness, running_bot
from tests.support.sql import statements

db_kind = both_databases()  # the examples and failures are window-function and substr queries by dialect
pytestmark = pytest.mark.usefixtures("bot_database")

SECRET = "owner_secret_formula_42"  # a name only the owner's program has: it must never reach another user
NUMPY = f"{SECRET} = 1\nimport numpy\nprint(numpy.zeros(3))"
FETCH = "import urllib.request\nurllib.request.urlopen('http://example.com/data.csv')"


def code_description(body: dict[str, Any]) -> str:
    """The description of the `code` tool in one LLM request."""
    for tool in body.get("tools") or []:
        if tool["function"]["name"] == "code":
            return str(tool["function"]["description"])
    raise AssertionError("the code tool was not offered")


def ctx_of(h: Harness, user: int) -> ToolContext:
    session = h.services.conversations.current_session(user, user).id
    return ToolContext(user_id=user, chat_id=user, session_id=session)


async def test_codestats_shows_one_short_example_per_top_error_category(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        tool, ctx = h.services.code, ctx_of(h, OWNER)
        await tool.execute(ctx, "print('ok')", "python", None)
        await tool.execute(ctx, NUMPY, "python", None)
        await tool.execute(ctx, "import numpy as np", "python", None)  # the latest import failure
        await tool.execute(ctx, "def broken(:\n    pass", "python", None)
        await tool.execute(ctx_of(h, FRIEND), "friend_private = 1\n1/0", "python", None)

        stats = await h.command(OWNER, "/codestats", "Code runs in the last 7 days")
        assert "Total: 4 · succeeded: 1 · failed: 3" in stats and "Top errors: import 2, syntax 1" in stats
        lines = stats.splitlines()
        (import_line,) = [x for x in lines if x.startswith("• import:")]
        assert import_line == (
            "• import: line 1: import numpy as np → ModuleNotFoundError: No module named 'numpy'"
        )
        (syntax_line,) = [x for x in lines if x.startswith("• syntax:")]
        assert "line 1: def broken(:" in syntax_line and "SyntaxError" in syntax_line
        assert "friend_private" not in stats and "ZeroDivisionError" not in stats


async def test_the_model_lists_this_sessions_failed_runs(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(
        tool_calls(call("code", {"action": "execute", "code": "rows = [1, 2]\nprint(rows[5])"})),
        tool_calls(call("code", {"action": "failures"})),
        text("The sixth row does not exist."),
    )
    async with running_bot(tmp_path, tg, llm) as h:
        # A failure of the owner's earlier session and one of the friend: neither is this session's.
        old = h.services.conversations.start_session(OWNER, OWNER, "earlier")
        await h.services.code.execute(
            ToolContext(user_id=OWNER, chat_id=OWNER, session_id=old.id),
            "import nothing_here",
            "python",
            None,
        )
        h.services.conversations.start_session(OWNER, OWNER, "now")
        await h.services.code.execute(ctx_of(h, FRIEND), "1/0", "python", None)
        tg.push_text(OWNER, "print the sixth row, and tell me what went wrong")
        await h.final_text(OWNER, "The sixth row does not exist.")
    result = json.loads(llm.requests[2]["messages"][-1]["content"])
    (failure,) = result["failures"]
    assert failure["code"] == "rows = [1, 2]\nprint(rows[5])" and failure["error_category"] == "runtime"
    assert failure["error"] == "IndexError: list index out of range"
    assert failure["failing_line"] == "line 2: print(rows[5])"


async def test_the_lessons_note_reaches_the_model_with_the_code_tool_and_only_for_its_user(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(
        tool_calls(call("code", {"action": "execute", "code": NUMPY})),
        tool_calls(call("code", {"action": "execute", "code": FETCH})),
        text("Neither worked."),
        text("Plain answer."),
        text("Hello friend."),
    )
    async with running_bot(tmp_path, tg, llm) as h:
        lessons = h.services.code.lessons
        assert lessons is not None
        tg.push_text(OWNER, "load the csv from example.com with numpy")
        await h.final_text(OWNER, "Neither worked.")
        assert "Lessons" not in code_description(llm.requests[0])  # no failures yet
        builds = lessons.builds

        # A plain turn: the note is in the code tool's description, and nothing reads the execution log.
        with statements(h.services.engine) as seen:
            tg.push_text(OWNER, "thanks anyway")
            await h.final_text(OWNER, "Plain answer.")
        description = code_description(llm.requests[-1])
        note = description[description.index("Lessons from this user's recent failed runs") :]
        assert "numpy is not installed in this sandbox" in note
        assert "the network is off in this sandbox: do not fetch from code" in note
        assert len(note) <= 600 and SECRET not in note and "urlopen" not in note
        assert not [s for s in seen if "code_executions" in s] and lessons.builds == builds

        # Another user's turn: no lessons of the owner's, and never the owner's code.
        tg.push_text(FRIEND, "hello")
        await h.final_text(FRIEND, "Hello friend.")
        assert "Lessons" not in code_description(llm.requests[-1])
        assert SECRET not in json.dumps(llm.requests[-1])


async def test_the_lessons_note_is_rebuilt_only_when_the_patterns_change_and_survives_a_restart(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with running_bot(tmp_path, tg, llm) as h:
        lessons, tool, ctx = h.services.code.lessons, h.services.code, ctx_of(h, OWNER)
        assert lessons is not None
        await tool.execute(ctx, NUMPY, "python", None)
        first = lessons.note(OWNER)
        assert first is not None and "numpy" in first and "network" not in first
        builds = lessons.builds
        await tool.execute(ctx, "print('fine')", "python", None)
        assert lessons.builds == builds and lessons.note(OWNER) == first  # no new failure: not rebuilt
        await tool.execute(ctx, FETCH, "python", None)
        changed = lessons.note(OWNER)
        assert lessons.builds == builds + 1 and changed is not None and "network is off" in changed

    llm.script(text("Back again."))
    async with running_bot(tmp_path, tg, llm) as h:  # a new process on the same database
        tg.push_text(OWNER, "hi")
        await h.final_text(OWNER, "Back again.")
        assert changed in code_description(llm.requests[-1])
