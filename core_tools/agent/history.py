"""The history a request sends: stored messages fitted to a token budget, each tool call with its results."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace

from core_tools.llm import estimate_tokens
from core_tools.types import ChatMessage, ToolCallRequest
from db.conversation_records import StoredMessage


def _to_chat(m: StoredMessage, images: Mapping[int, tuple[str, ...]] | None = None) -> ChatMessage:
    pictures = images.get(m.id, ()) if images and m.role == "user" else ()
    if pictures:
        calls = tuple(ToolCallRequest(c["id"], c["name"], c["arguments"]) for c in m.tool_calls or [])
        return ChatMessage(m.role, m.content, calls, m.tool_call_id, m.tool_name, pictures)
    return _derived(m).chat


class _Derived:
    """A stored message's request form and token estimate, computed once per row (kept on it: a
    history's rows come back turn after turn from the history cache)."""

    __slots__ = ("chat", "cost")

    def __init__(self, m: StoredMessage) -> None:
        calls = tuple(ToolCallRequest(c["id"], c["name"], c["arguments"]) for c in m.tool_calls or [])
        self.chat = ChatMessage(m.role, m.content, calls, m.tool_call_id, m.tool_name)
        # json.dumps([]) is "[]": most messages have no tool calls.
        text = json.dumps(m.tool_calls) if m.tool_calls else "[]"
        self.cost = estimate_tokens((m.content or "") + text) + 4


def _derived(m: StoredMessage) -> _Derived:
    known = m.derived
    if not isinstance(known, _Derived):
        known = m.derived = _Derived(m)
    return known


# Under a tight budget each tool result keeps at least its head (where a page's title or an error is); fewer
# characters when a round holds so many results that even this much would not fit.
MIN_RESULT_CHARS = 400
FLOOR_RESULT_CHARS = 80
CHARS_PER_TOKEN = 4  # the same rough ratio as estimate_tokens


def _cost(m: StoredMessage) -> int:
    return _derived(m).cost


def cut_result(content: str, keep: int) -> str:
    """The first `keep` characters of a tool result with a mark saying how much was cut."""
    if len(content) <= keep:
        return content
    return f"{content[:keep]}\n[cut: {keep} of {len(content)} characters]"


def _shrunk(unit: list[StoredMessage], keep: int) -> list[StoredMessage]:
    return [replace(m, content=cut_result(m.content or "", keep)) if m.role == "tool" else m for m in unit]


def _share(sizes: list[int], allowed: int, floor: int) -> int:
    """The largest per-result cap (at least `floor`) with which the results fit in `allowed` characters."""
    if sum(sizes) <= allowed:
        return max(sizes, default=0)
    low, high = floor, max(sizes)
    while low < high:  # binary search on the cap: sum(min(size, cap)) grows with the cap
        mid = (low + high + 1) // 2
        if sum(min(s, mid) for s in sizes) <= allowed:
            low = mid
        else:
            high = mid - 1
    return low


def _units(stored: Sequence[StoredMessage]) -> list[list[StoredMessage]]:
    """Messages grouped so that an assistant tool call and its results are one unit."""
    units: list[list[StoredMessage]] = []
    # An answer replaced by /retry or an edit stays in the database but is not part of the conversation.
    stored = [m for m in stored if m.status != "superseded"]
    i, n = 0, len(stored)
    while i < n:
        m = stored[i]
        i += 1
        role = m.role
        if role == "user":
            units.append([m])
        elif role == "assistant":
            if m.tool_calls:
                wanted = {c["id"] for c in m.tool_calls}
                group = [m]
                while i < n and stored[i].role == "tool":
                    group.append(stored[i])
                    i += 1
                if wanted <= {g.tool_call_id for g in group[1:]}:
                    units.append([g for g in group if g.role == "assistant" or g.tool_call_id in wanted])
            elif (m.content or "").strip():
                units.append([m])
        elif role != "tool":  # (a tool result outside its round is an orphan: left out)
            units.append([m])
    return units


def _fit_current_turn(units: list[list[StoredMessage]], token_budget: int) -> list[list[StoredMessage]]:
    """The current turn whole, its tool results shrunk to the budget: oldest round first, one round's
    results sharing equally. The question and every call with its result stay, even over the budget."""
    fixed = sum(_cost(m) for unit in units for m in unit if m.role != "tool")
    rounds = [[len(m.content or "") for m in unit if m.role == "tool"] for unit in units]
    n_results = sum(len(r) for r in rounds)
    if not n_results:
        return units
    available = max(0, token_budget - fixed - 4 * n_results) * CHARS_PER_TOKEN
    floor = max(FLOOR_RESULT_CHARS, min(MIN_RESULT_CHARS, available // n_results))
    total = sum(sum(r) for r in rounds)
    out: list[list[StoredMessage]] = []
    for unit, sizes in zip(units, rounds, strict=True):
        excess = total - available
        if not sizes or excess <= 0:
            out.append(unit)
            continue
        cap = _share(sizes, max(0, sum(sizes) - excess), floor)
        shrunk = _shrunk(unit, cap)
        total -= sum(sizes) - sum(min(s, cap) for s in sizes)
        out.append(shrunk)
    return out


def build_history(
    stored: Sequence[StoredMessage],
    token_budget: int,
    current_id: int | None = None,
    images: Mapping[int, tuple[str, ...]] | None = None,
) -> list[ChatMessage]:
    """The conversation within the budget: the current turn always, then older messages newest first.

    The current turn (from the user message `current_id`, or the last user message) always goes in whole,
    its tool results cut to fit (`cut_result`). Older messages are dropped oldest first; an older tool
    round that does not fit is kept with its results cut short before it is dropped. A tool call is never
    split from its results; an assistant message whose results are incomplete (a turn cut by a crash) is
    dropped with its partial results: the API rejects a tool call without a result.
    """
    units = _units(stored)
    # The current turn: the unit of `current_id`, else the last one a user message begins (near the end).
    current, last_start = None, None
    for k in range(len(units) - 1, -1, -1):
        first = units[k][0]
        if first.role == "user":
            if first.id == current_id:
                current = k
                break
            if last_start is None:
                last_start = k
    if current is None:
        current = last_start if last_start is not None else len(units)
    tail = _fit_current_turn(units[current:], token_budget)
    used = sum(_cost(m) for unit in tail for m in unit)
    kept: list[list[StoredMessage]] = []
    for unit in reversed(units[:current]):
        cost = _cost(unit[0]) if len(unit) == 1 else sum(_cost(m) for m in unit)
        if used + cost > token_budget and len(unit) > 1:
            unit = _shrunk(unit, MIN_RESULT_CHARS)
            cost = sum(_cost(m) for m in unit)
        if used + cost > token_budget:
            break
        kept.append(unit)
        used += cost
    kept.reverse()
    # (Without images each message's request form is the one kept on its row.)
    older = [_to_chat(m, images) if images else _derived(m).chat for unit in kept for m in unit]
    now = [_to_chat(m, images) if images else _derived(m).chat for unit in tail for m in unit]
    # A history must not start with tool results or an assistant tool call cut from its user message.
    start = 0
    while start < len(older) and older[start].role != "user":
        start += 1
    return older[start:] + now
