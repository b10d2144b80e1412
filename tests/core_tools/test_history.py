"""The history trimmer: the current turn always whole, results cut (oldest round first) instead of dropped."""

from __future__ import annotations

import re

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from core_tools.agent.history import build_history, cut_result
from core_tools.llm import estimate_tokens
from db.conversation_records import StoredMessage
from db.conversations import Conversations


def _m(
    i: int, role: str, content: str | None, calls: list[str] | None = None, answers: str | None = None
) -> StoredMessage:
    tool_calls = [{"id": c, "name": "fetch", "arguments": "{}"} for c in calls] if calls else None
    return StoredMessage(i, role, content, tool_calls, answers, "fetch" if answers else None, "done")


def _cut_sizes(contents: list[str | None]) -> list[tuple[int, int] | None]:
    out: list[tuple[int, int] | None] = []
    for c in contents:
        found = re.search(r"\[cut: (\d+) of (\d+) characters\]$", c or "")
        out.append((int(found.group(1)), int(found.group(2))) if found else None)
    return out


def test_cut_result_marks_what_was_cut() -> None:
    assert cut_result("short", 10) == "short"
    assert cut_result("x" * 50, 10) == "x" * 10 + "\n[cut: 10 of 50 characters]"


def test_one_round_over_the_budget_keeps_question_and_every_result_cut_evenly() -> None:
    msgs = [
        _m(1, "user", "old question"),
        _m(2, "assistant", "old answer"),
        _m(3, "user", "compare three pages"),
        _m(4, "assistant", None, calls=["a", "b", "c"]),
        _m(5, "tool", "A" * 12_000, answers="a"),
        _m(6, "tool", "B" * 12_000, answers="b"),
        _m(7, "tool", "C" * 2_000, answers="c"),
    ]
    out = build_history(msgs, token_budget=3000, current_id=3)
    assert [m.role for m in out] == ["user", "assistant", "tool", "tool", "tool"]
    assert out[0].content == "compare three pages"  # the older turn made room, the question did not
    assert [m.tool_call_id for m in out[2:]] == ["a", "b", "c"]
    sizes = _cut_sizes([m.content for m in out[2:]])
    assert sizes[0] is not None and sizes[1] is not None and sizes[0] == sizes[1]  # one share each
    assert sizes[0][1] == 12_000 and out[4].content == "C" * 2_000  # the small result is kept whole
    total = sum(estimate_tokens(m.content or "") + 4 for m in out) + 20
    assert total <= 3000 * 1.05


def test_the_oldest_round_of_the_turn_is_cut_first() -> None:
    msgs = [
        _m(1, "user", "research this"),
        _m(2, "assistant", None, calls=["r1"]),
        _m(3, "tool", "1" * 8_000, answers="r1"),
        _m(4, "assistant", "now the second source", calls=["r2"]),
        _m(5, "tool", "2" * 8_000, answers="r2"),
    ]
    out = build_history(msgs, token_budget=2500)
    first, second = _cut_sizes([out[2].content, out[4].content])
    assert first is not None and 400 <= first[0] < 2_000  # cut first, by what the budget needs
    assert second is None and out[4].content == "2" * 8_000  # the newest result whole, since it fits
    tighter = build_history(msgs, token_budget=1500)
    first, second = _cut_sizes([tighter[2].content, tighter[4].content])
    assert first == (400, 8_000) and second is not None and second[0] > 400  # then the newer round


def test_a_tiny_budget_still_answers_every_call() -> None:
    calls = [f"c{k}" for k in range(30)]
    msgs = [
        _m(1, "user", "q"),
        _m(2, "assistant", None, calls=calls),
        *(_m(3 + k, "tool", "x" * 5_000, answers=cid) for k, cid in enumerate(calls)),
    ]
    out = build_history(msgs, token_budget=500)
    assert out[0].content == "q" and [m.tool_call_id for m in out[2:]] == calls
    assert all("[cut: 80 of 5000 characters]" in (m.content or "") for m in out[2:])  # the floor


def test_an_older_round_is_shrunk_before_it_is_dropped() -> None:
    msgs = [
        _m(1, "user", "fetch it"),
        _m(2, "assistant", None, calls=["a"]),
        _m(3, "tool", "A" * 40_000, answers="a"),
        _m(4, "assistant", "It says A."),
        _m(5, "user", "thanks"),
    ]
    out = build_history(msgs, token_budget=1000)
    assert [m.role for m in out] == ["user", "assistant", "tool", "assistant", "user"]
    assert _cut_sizes([out[2].content]) == [(400, 40_000)]


def test_messages_since_reaches_past_the_row_limit(
    db_sessions: sessionmaker[Session], engine: Engine
) -> None:
    conv = Conversations(db_sessions, engine)
    session = conv.current_session(1, 1)
    first = conv.add_message(session.id, 1, 1, "user", "a question with many tool calls")
    calls = [{"id": "x", "name": "t", "arguments": ""}]
    conv.add_message(session.id, 1, 1, "assistant", None, tool_calls=calls)
    for _ in range(10):
        conv.add_message(session.id, 1, 1, "tool", "r", tool_call_id="x", tool_name="t")
    assert len(conv.messages(session.id, limit=5)) == 5
    rows = conv.messages(session.id, limit=5, since_id=first)
    assert [r.id for r in rows] == sorted(r.id for r in rows) and rows[0].id == first and len(rows) == 12
    out = build_history(rows, token_budget=8000, current_id=first)
    assert out[0].content == "a question with many tool calls"
