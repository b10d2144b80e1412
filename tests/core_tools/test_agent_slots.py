"""Helper slots shared fairly between users (core_tools.agents.slots) and the time bounds of a sub-turn:
built by construction (tasks that hold a slot until the test lets go), never by timing."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Hashable, Sequence
from typing import Any, cast

import pytest

from core_tools.agents import Helper, SubTurnLimits, SubTurns
from core_tools.agents.slots import FairSlots
from core_tools.errors import ToolError
from core_tools.llm import LLMClient
from core_tools.registry import ToolRegistry
from core_tools.types import ChatMessage, LLMReply, ToolContext

OWNER, FRIEND, THIRD = 111, 222, 333


async def settle() -> None:
    """Let every task that can run, run (no time passes: only yields)."""
    for _ in range(20):
        await asyncio.sleep(0)


def waiter(slots: FairSlots, user: Hashable, granted: list[Hashable], name: str = "") -> asyncio.Task[bool]:
    async def go() -> bool:
        ok = await slots.acquire(user)
        granted.append(name or user)
        return ok

    return asyncio.create_task(go())


async def test_a_slot_given_back_goes_to_the_user_who_holds_fewest_not_to_the_first_in_line() -> None:
    slots = FairSlots(2)
    assert await slots.acquire(OWNER) and await slots.acquire(OWNER)
    granted: list[Hashable] = []
    owners = [waiter(slots, OWNER, granted, f"owner {n}") for n in range(3, 7)]
    await settle()
    friend = waiter(slots, FRIEND, granted, "friend")
    await settle()
    assert slots.waiting(OWNER) == 4 and slots.waiting(FRIEND) == 1

    slots.release(OWNER)  # the owner still holds one, the friend none: the friend's helper goes
    await settle()
    assert granted == ["friend"] and friend.done()
    assert slots.in_use(FRIEND) == 1 and slots.in_use(OWNER) == 1 and slots.waiting(OWNER) == 4

    slots.release(FRIEND)  # nobody else waits: the owner's helpers go on, in the order they asked
    slots.release(OWNER)
    await settle()
    assert granted == ["friend", "owner 3", "owner 4"]
    slots.release(OWNER)
    slots.release(OWNER)
    assert all(await asyncio.gather(*owners))
    assert granted[3:] == ["owner 5", "owner 6"] and slots.in_use() == slots.in_use(OWNER) == 2


async def test_users_with_equal_holdings_take_turns() -> None:
    slots = FairSlots(2)
    assert await slots.acquire(OWNER) and await slots.acquire(OWNER)
    granted: list[Hashable] = []
    for user, n in [(OWNER, 3), (OWNER, 4), (FRIEND, 1), (FRIEND, 2), (THIRD, 1), (THIRD, 2)]:
        waiter(slots, user, granted, f"{user}:{n}")
    await settle()
    order = [OWNER, OWNER, FRIEND, THIRD, OWNER, FRIEND]  # who gives a slot back, step by step
    for user in order:
        slots.release(user)
        await settle()
        assert slots.in_use() == 2
    # friend and third hold none and were never served; then each gets a turn in the order served.
    assert granted == [f"{FRIEND}:1", f"{THIRD}:1", f"{OWNER}:3", f"{FRIEND}:2", f"{THIRD}:2", f"{OWNER}:4"]


async def test_a_waiter_cancelled_just_as_it_was_handed_a_slot_passes_it_on() -> None:
    slots = FairSlots(1)
    assert await slots.acquire(OWNER)
    granted: list[Hashable] = []
    friend = waiter(slots, FRIEND, granted)
    third = waiter(slots, THIRD, granted)
    await settle()
    slots.release(OWNER)  # handed to the friend, whose task has not run since
    assert slots.in_use(FRIEND) == 1
    friend.cancel()  # /stop before the friend's helper resumed
    with pytest.raises(asyncio.CancelledError):
        await friend
    await settle()
    assert granted == [THIRD] and slots.in_use(THIRD) == 1 and slots.in_use(FRIEND) == 0
    assert await third


async def test_a_wait_that_ends_without_a_slot_leaves_nothing_behind() -> None:
    slots = FairSlots(1)
    assert await slots.acquire(OWNER)
    assert await slots.acquire(FRIEND, timeout_s=0.01) is False  # the owner never gives it back
    assert slots.waiting() == 0 and slots.in_use() == 1
    slots.release(OWNER)
    assert slots.in_use() == 0 and await slots.acquire(FRIEND)


async def test_the_global_cap_is_never_exceeded_and_no_slot_idles_while_someone_waits() -> None:
    rng = random.Random(31)
    total = 3
    slots = FairSlots(total)
    holding: list[tuple[Hashable, asyncio.Task[bool]]] = []  # tasks that have a slot and not given it back
    waiting: list[asyncio.Task[bool]] = []
    users = [OWNER, FRIEND, THIRD, 444, 555]

    def start(user: Hashable) -> None:
        async def go() -> bool:
            ok = await slots.acquire(user)
            holding.append((user, task))
            return ok

        task = asyncio.create_task(go())
        waiting.append(task)

    for _ in range(600):
        step = rng.random()
        if step < 0.5:
            start(rng.choice(users))
        elif step < 0.85 and holding:
            user, _task = holding.pop(rng.randrange(len(holding)))
            slots.release(user)
        else:
            pending = [t for t in waiting if not t.done()]
            if pending:
                rng.choice(pending).cancel()
        await settle()
        waiting = [t for t in waiting if not t.done()]
        assert slots.in_use() == len(holding) <= total
        assert slots.waiting() == len(waiting)
        if waiting:  # work-conserving: a free slot never sits unused while a helper waits
            assert slots.in_use() == total
    assert slots.peak == total
    while holding:
        user, _task = holding.pop()
        slots.release(user)
        await settle()
    assert slots.in_use() == 0 and slots.waiting() == 0


class BlockedModel:
    """A model whose helper requests wait until the test releases them (or forever)."""

    def __init__(self) -> None:
        self.release: dict[str, asyncio.Event] = {}
        self.started: list[str] = []

    async def complete(self, messages: Sequence[ChatMessage], **kwargs: Any) -> LLMReply:
        task = str(messages[-1].content)
        self.started.append(task)
        await self.release.setdefault(task, asyncio.Event()).wait()
        return LLMReply(f"done: {task}")


def subturns(model: BlockedModel, slots: int) -> SubTurns:
    return SubTurns(cast(LLMClient, model), ToolRegistry(), SubTurnLimits(max_concurrent=slots))


def ctx(user: int) -> ToolContext:
    return ToolContext(user_id=user, chat_id=user, session_id=f"s{user}", turn_id=user)


HELPER = Helper("delegate", "You help.", ())


async def test_a_helper_that_runs_past_its_time_ends_with_a_clear_error_and_gives_its_slot_back() -> None:
    model = BlockedModel()
    runs = subturns(model, 1)
    with pytest.raises(ToolError, match=r"the helper delegate did not finish within 0.05 s"):
        await runs.run(HELPER, "never ends", ctx(OWNER), timeout_s=0.05)
    assert runs.slots.in_use() == 0
    model.release["quick"] = asyncio.Event()
    model.release["quick"].set()
    assert (await runs.run(HELPER, "quick", ctx(FRIEND), timeout_s=0.05))["answer"] == "done: quick"


async def test_a_helper_that_gets_no_slot_in_time_says_so_and_the_friends_next_one_is_served_first() -> None:
    model = BlockedModel()
    runs = subturns(model, 1)
    owner = [asyncio.create_task(runs.run(HELPER, f"owner {n}", ctx(OWNER))) for n in (1, 2)]
    await settle()
    assert model.started == ["owner 1"]
    with pytest.raises(ToolError, match=r"no helper slot came free within 0.01 s \(at most 1 run at once"):
        await runs.run(HELPER, "friend 1", ctx(FRIEND), timeout_s=0.01)

    friend = asyncio.create_task(runs.run(HELPER, "friend 2", ctx(FRIEND)))
    await settle()
    model.release["owner 1"].set()  # the owner's second helper asked first, but the friend holds none
    await settle()
    assert model.started == ["owner 1", "friend 2"]
    model.release["friend 2"].set()
    assert (await friend)["answer"] == "done: friend 2"
    model.release.setdefault("owner 2", asyncio.Event()).set()
    assert [r["answer"] for r in await asyncio.gather(*owner)] == ["done: owner 1", "done: owner 2"]
    assert runs.slots.peak == 1
