"""Helper agents through the whole bot (fake Bot API, fake LLM, a real database): an agent's sub-turn with
its own tool call and usage, `delegate` with a subset of tools, one level deep, at most
SUBAGENT_MAX_CONCURRENT at once, shared fairly between users, /stop during a sub-turn, and a usage cap reached
inside one."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from db.models import LLMCall, Message, ToolCallLog
from tests.support.fakes.openai_api import FakeLLM, Step, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, rows, running_bot

PLANNER_PROMPT = "You are PLANNER. Look at the user's schedules with the schedule tool."


def agents_file(tmp_path: Path, *agents: dict[str, Any]) -> str:
    path = tmp_path / "agents.json"
    path.write_text(json.dumps({"agents": list(agents)}), encoding="utf-8")
    return str(path)


PLANNER = {
    "name": "planner",
    "description": "Answers questions about the user's reminders and tasks.",
    "system_prompt": PLANNER_PROMPT,
    "tools": ["schedule"],
    "max_tokens": 500,
}


def offered(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools") or []}


def shown(tg: FakeTelegram, chat: int) -> list[str]:
    """Every text the bot sent or edited into the chat, in order (status lines included)."""
    return [
        str(c.params.get("text"))
        for c in tg.calls
        if c.method in ("sendMessage", "editMessageText") and c.params.get("chat_id") == chat and c.ok
    ]


def tool_messages(request: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tool results in a request, by tool name, parsed."""
    return {m["name"]: json.loads(m["content"]) for m in request["messages"] if m["role"] == "tool"}


def held(release: asyncio.Event, answer: str) -> Any:
    """A scripted step that waits (as a slow model would) until the test releases it."""

    async def step(body: dict[str, Any]) -> Step:
        await release.wait()
        return text(answer)

    return step


async def test_an_agent_runs_its_own_sub_turn_with_its_own_tool_call_and_usage(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    release = asyncio.Event()

    async def sub_first(body: dict[str, Any]) -> Step:
        await release.wait()  # the status line is seen while the helper works
        return tool_calls(call("schedule", {"action": "list"}))

    llm.script(
        tool_calls(call("agent__planner", {"task": "Which reminders does the user have?"})),
        sub_first,
        text("The user has no reminders."),
        text("You have no reminders, says the planner."),
    )
    path = agents_file(tmp_path, PLANNER)
    async with running_bot(tmp_path, tg, llm, agents_file=path) as h:
        tg.push_text(OWNER, "what reminders do I have? ask the planner")
        await tg.wait_for(
            lambda: any("helper planner: thinking..." in t for t in shown(tg, OWNER)),
            what="the helper in the status line",
        )
        release.set()
        await h.final_text(OWNER, "You have no reminders, says the planner.")

        main, sub1, sub2, final = llm.requests
        assert "agent__planner" in offered(main) and "delegate" not in offered(main)  # delegate is off
        # The sub-turn sees its prompt and the task, nothing of the chat; only its tools (and read_result).
        assert [m["role"] for m in sub1["messages"]] == ["system", "user"]
        assert sub1["messages"][0]["content"].startswith(PLANNER_PROMPT)
        assert sub1["messages"][1]["content"] == "Which reminders does the user have?"
        assert offered(sub1) == {"schedule", "read_result"}
        assert sub1["max_completion_tokens"] == 500 and main["max_completion_tokens"] != 500
        assert tool_messages(sub2)["schedule"]["schedules"] == []
        result = tool_messages(final)["agent__planner"]
        assert result["answer"] == "The user has no reminders."
        assert result["tools_used"] == ["schedule"] and result["usage"]["llm_calls"] == 2

        calls = rows(h, LLMCall)
        assert [c["purpose"] for c in calls] == ["chat", "subagent", "subagent", "chat"]
        session = calls[0]["session_id"]
        assert all(c["session_id"] == session and c["user_id"] == OWNER and not c["error"] for c in calls)
        logged = rows(h, ToolCallLog)
        assert [(t["tool"], t["ok"]) for t in logged] == [("schedule", True), ("agent__planner", True)]
        assert json.loads(logged[1]["result"])["usage"]["prompt_tokens"] == sum(
            c["prompt_tokens"] for c in calls[1:3]
        )
        # The sub-turn's messages are not part of the chat's history.
        stored = [m["role"] for m in rows(h, Message)]
        assert stored == ["user", "assistant", "tool", "assistant"]


async def test_delegate_gets_a_subset_of_the_callers_tools_and_cannot_delegate_again(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(
        tool_calls(
            call("delegate", {"task": "List the schedules.", "tools": ["schedule"]}),
            call("delegate", {"task": "Do it another way.", "tools": ["schedule", "agent__nobody"]}),
        ),
        # The helper tries to delegate further, and lists the schedules.
        tool_calls(call("delegate", {"task": "you do it"}), call("schedule", {"action": "list"})),
        text("Nothing is scheduled."),
        text("Nothing is scheduled, the helper found."),
    )
    async with running_bot(tmp_path, tg, llm, subagent_delegate=True) as h:
        tg.push_text(OWNER, "delegate a look at my schedules")
        await h.final_text(OWNER, "Nothing is scheduled, the helper found.")
        main, sub1, sub2, final = llm.requests
        assert "delegate" in offered(main)
        assert offered(sub1) == {"schedule", "read_result"}
        inner = tool_messages(sub2)
        assert inner["delegate"]["ok"] is False and "one level deep" in inner["delegate"]["error"]
        assert "schedules" in inner["schedule"]
        results = [json.loads(m["content"]) for m in final["messages"] if m["role"] == "tool"]
        assert results[0]["answer"] == "Nothing is scheduled." and results[0]["tools_used"] == [
            "delegate",
            "schedule",
        ]
        assert results[1]["ok"] is False and "not among your tools: agent__nobody" in results[1]["error"]
        assert [c["purpose"] for c in rows(h, LLMCall)] == ["chat", "subagent", "subagent", "chat"]


async def test_parallel_sub_turns_wait_for_a_slot_beyond_the_limit(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    release = asyncio.Event()
    llm.script(
        tool_calls(*(call("delegate", {"task": f"task {n}", "tools": []}) for n in (1, 2, 3))),
        held(release, "one"),
        held(release, "two"),
        held(release, "three"),
        text("All three are done."),
    )
    async with running_bot(
        tmp_path, tg, llm, subagent_delegate=True, subagent_max_concurrent=2, memory_extract=False
    ) as h:
        tg.push_text(OWNER, "do three things at once")
        # Two sub-turns wait on the model; the third waits for a slot, and the status line says so.
        await tg.wait_for(
            lambda: llm.active == 2 and any("[helpers: 2 running, 1 waiting]" in t for t in shown(tg, OWNER)),
            what="two helpers at the model and one waiting for a slot",
        )
        assert len(llm.requests) == 3  # the turn's request and two sub-turns': the third has not started
        release.set()
        await h.final_text(OWNER, "All three are done.")
        assert len(llm.requests) == 5
        assert llm.max_active == 2
        answers = {r["answer"] for r in tool_messages_all(llm.requests[-1])}
        assert answers == {"one", "two", "three"}
        assert [c["purpose"] for c in rows(h, LLMCall)].count("subagent") == 3


def tool_messages_all(request: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(m["content"]) for m in request["messages"] if m["role"] == "tool"]


async def test_stop_during_a_sub_turn_ends_it_and_the_turn(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(
        tool_calls(call("agent__planner", {"task": "Look at everything, slowly."})),
        text("word " * 20, hold=asyncio.Event()),  # the helper's answer: streams until it is stopped
        text("Back again."),
    )
    path = agents_file(tmp_path, PLANNER)
    async with running_bot(tmp_path, tg, llm, agents_file=path) as h:
        tg.push_text(OWNER, "ask the planner")
        await tg.wait_for(
            lambda: (
                len(llm.requests) == 2
                and llm.active == 1
                and any("helper planner: thinking..." in t for t in shown(tg, OWNER))
            ),
            what="the helper's request streaming",
        )
        tg.push_text(OWNER, "/stop")
        await h.final_text(OWNER, "(stopped)")
        await tg.wait_for(lambda: llm.disconnects == 1, what="the helper's stream closed by the client")
        user = [(m["content"], m["status"]) for m in rows(h, Message) if m["role"] == "user"]
        assert user == [("ask the planner", "stopped")]
        calls = rows(h, LLMCall)
        assert [(c["purpose"], c["error"]) for c in calls] == [("chat", None), ("subagent", "stopped")]
        assert rows(h, ToolCallLog) == []  # the helper's call never finished

        # The chat is free, and the unfinished call is not in the history.
        tg.push_text(OWNER, "and now?")
        await h.final_text(OWNER, "Back again.")
        assert all(m.get("tool_calls") is None for m in llm.requests[-1]["messages"])


async def test_a_cap_reached_inside_a_sub_turn_is_an_error_result_for_the_model(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(
        tool_calls(call("delegate", {"task": "Summarise the schedules.", "tools": ["schedule"]})),
        text("I could not finish: your usage cap is reached."),
    )
    # The turn's first request is admitted (nothing spent yet) and spends more than the cap.
    async with running_bot(tmp_path, tg, llm, subagent_delegate=True, budget_daily_tokens=50) as h:
        tg.push_text(OWNER, "delegate a summary")
        await h.final_text(OWNER, "I could not finish: your usage cap is reached.")
        _, final = llm.requests  # the helper's request was refused before it was sent
        result = tool_messages(final)["delegate"]
        assert result["ok"] is False
        assert "helper delegate stopped: Usage cap reached" in result["error"]
        assert [c["purpose"] for c in rows(h, LLMCall)] == ["chat", "final"]
        (logged,) = rows(h, ToolCallLog)
        assert logged["tool"] == "delegate" and not logged["ok"]


GROUP = -100777


async def test_a_helper_gets_private_tools_only_in_the_users_private_chat(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    keeper = {**PLANNER, "name": "keeper", "system_prompt": "You are KEEPER."}
    keeper["tools"] = ["memory", "schedule"]
    llm.script(
        tool_calls(call("agent__keeper", {"task": "What do you remember about the group?"})),
        tool_calls(call("memory", {"action": "list"})),  # not offered here: refused
        text("I cannot see memories here."),
        text("No memories in a group."),
        tool_calls(call("agent__keeper", {"task": "What do you remember?"})),
        text("Nothing yet."),
        text("Nothing remembered yet."),
    )
    path = agents_file(tmp_path, keeper)
    async with running_bot(tmp_path, tg, llm, agents_file=path, allowed_chat_ids=str(GROUP)) as h:
        tg.push_text(OWNER, "@test_bot ask the keeper", chat_id=GROUP)
        await h.final_text(GROUP, "No memories in a group.")
        tg.push_text(OWNER, "ask the keeper")
        await h.final_text(OWNER, "Nothing remembered yet.")
        subs = [r for r in llm.requests if r["messages"][0]["content"].startswith("You are KEEPER.")]
        in_group, refused, in_private = subs
        assert offered(in_group) == {"schedule", "read_result"}
        error = tool_messages(refused)["memory"]["error"]
        assert error == "the tool 'memory' is not available to this helper"
        assert offered(in_private) == {"memory", "schedule", "read_result"}
        assert "memory" not in [t["tool"] for t in rows(h, ToolCallLog)]


class FanOut:
    """The model for two users at once, routed by what each request is: the owner's turn fans out six
    helpers that each block until the test releases them, the friend's turn one that answers at once."""

    def __init__(self) -> None:
        self.release = {f"owner task {n}": asyncio.Event() for n in range(1, 7)}
        self.started: list[str] = []  # helper tasks, in the order their first request came
        self.active = 0  # helper requests in flight
        self.max_active = 0

    async def __call__(self, body: dict[str, Any]) -> Step:
        messages = body["messages"]
        if "You are a helper working on one task" in str(messages[0]["content"]):
            task = str(messages[-1]["content"])
            self.started.append(task)
            self.active += 1
            self.max_active = max(self.max_active, self.active)
            try:
                if task in self.release:
                    await self.release[task].wait()
                return text(f"done: {task}")
            finally:
                self.active -= 1
        asked = next(str(m["content"]) for m in messages if m["role"] == "user")
        if messages[-1]["role"] == "tool":
            results = [json.loads(m["content"]) for m in messages if m["role"] == "tool"]
            answers = sorted(str(r.get("answer", r.get("error"))) for r in results)
            return text(f"{asked}: {'; '.join(answers)}")
        if asked == "fan out six":
            return tool_calls(*(call("delegate", {"task": t, "tools": []}) for t in self.release))
        return tool_calls(call("delegate", {"task": "friend task", "tools": []}))


async def test_one_users_fan_out_does_not_keep_another_users_helper_waiting(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    model = FanOut()
    llm.default = model
    async with running_bot(
        tmp_path, tg, llm, subagent_delegate=True, subagent_max_concurrent=2, memory_extract=False
    ) as h:
        tg.push_text(OWNER, "fan out six")
        await tg.wait_for(
            lambda: (
                len(model.started) == 2
                and any("[helpers: 2 running, 4 waiting]" in t for t in shown(tg, OWNER))
            ),
            what="two of the owner's helpers at the model and four waiting",
        )
        tg.push_text(FRIEND, "one quick thing")
        await tg.wait_for(
            lambda: any("waiting for a free helper slot" in t for t in shown(tg, FRIEND)),
            what="the friend's helper waiting for a slot",
        )
        first, second = model.started
        model.release[first].set()
        # The slot the owner gives back goes to the friend, not to the owner's third helper: the friend
        # holds none, the owner still holds one.
        await tg.wait_for(lambda: len(model.started) == 3, what="the next helper at the model")
        assert model.started[2] == "friend task"
        await h.final_text(FRIEND, "one quick thing: done: friend task")
        # ...while the owner's other helper is still blocked (the friend's slot then went on to the owner).
        assert not model.release[second].is_set() and second in model.started
        assert not any("fan out six:" in t for t in tg.sent_texts(OWNER))

        for event in model.release.values():
            event.set()
        answer = await h.final_text(OWNER, "fan out six: ")
        assert answer.count("done: owner task") == 6
        assert model.max_active == 2  # the operator's limit held throughout
        assert sorted(model.started) == sorted([*model.release, "friend task"])
