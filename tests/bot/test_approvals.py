"""Approval before risky actions (issue 23 §3) through the whole bot: the fake Bot API, the fake LLM, a real
database. A call that needs approval waits for its user's Approve, Deny or Always; the model gets the
tool's result, or "denied by the user"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bot.process.ops import check_tools
from bot.process.wiring import build_services
from db.models import Approval, ApprovalAlways
from tests.support.databases import both_databases
from tests.support.fakes.openai_api import FakeLLM, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, Harness, make_settings, register_math, rows
from tests.support.harness import running_bot as harness_bot
from tests.support.mcp_servers.helpers import stdio_entry
from tests.support.schedules import local_at, wait_sent

GROUP = -100777

db_kind = both_databases()  # the decision crosses processes through the database: SQLite and PostgreSQL
pytestmark = pytest.mark.usefixtures("bot_database")  # its bots run on the test's database


def running_bot(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, **overrides: Any) -> Any:
    """The harness's bot with a short APPROVAL_TIMEOUT_S unless the test sets one: the bot's stop waits for
    a turn that waits for a press, so a test failing there ends in seconds, not after the default 300 s."""
    overrides.setdefault("approval_timeout_s", 45)
    return harness_bot(tmp_path, tg, llm, **overrides)


def prompts(tg: FakeTelegram, chat: int) -> list[dict[str, Any]]:
    """The bot's messages in the chat that carry approval buttons (now or before they were answered)."""
    found = []
    for m in tg.messages.get(chat, []):
        markup = m.get("reply_markup") or {}
        datas = [b.get("callback_data", "") for row in markup.get("inline_keyboard", []) for b in row]
        if any(d.startswith("apr:") for d in datas) or "may I run" in str(m.get("text", "")):
            found.append(m)
    return found


async def prompt(tg: FakeTelegram, chat: int, n: int = 1) -> tuple[dict[str, Any], dict[str, str]]:
    """Wait for the `n`th approval prompt in the chat; it and its buttons' callback data by label."""
    await tg.wait_for(lambda: len(prompts(tg, chat)) >= n, what=f"approval prompt {n} in chat {chat}")
    message = prompts(tg, chat)[n - 1]
    return message, buttons_of(message)


def buttons_of(message: dict[str, Any]) -> dict[str, str]:
    """A message's buttons: their callback data by label."""
    return {b["text"]: b["callback_data"] for row in message["reply_markup"]["inline_keyboard"] for b in row}


def tool_result(llm: FakeLLM, request: int = 1) -> str:
    """The content of the last tool message of the LLM request `request` (0-based)."""
    tools = [m for m in llm.requests[request]["messages"] if m["role"] == "tool"]
    return str(tools[-1]["content"])


def answers(tg: FakeTelegram) -> list[str]:
    """The texts of every answerCallbackQuery."""
    return [str(c.params.get("text")) for c in tg.calls_to("answerCallbackQuery")]


def approvals(h: Harness) -> list[Any]:
    return rows(h, Approval)


async def test_approve_runs_the_tool_and_the_decision_is_logged(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(tool_calls(call("add", {"a": 2, "b": 3})), text("The sum is 5."))
    async with running_bot(tmp_path, tg, llm, setup=register_math, approve_tools="add") as h:
        tg.push_text(OWNER, "add 2 and 3")
        message, buttons = await prompt(tg, OWNER)
        assert list(buttons) == ["Approve", "Deny", "Always in this chat"]
        assert all(len(d.encode()) < 64 for d in buttons.values())
        assert message["text"] == "Ann, may I run add?\n\n<pre>a: 2\nb: 3</pre>"
        assert len(llm.requests) == 1  # the turn waits: no second request yet
        tg.push_callback(OWNER, buttons["Approve"], message_id=message["message_id"])
        await h.final_text(OWNER, "The sum is 5.")
        assert json.loads(tool_result(llm)) == {"sum": 5}
        assert "Approved." in answers(tg)
        assert any("Approved by Ann" in t for t in tg.sent_texts(OWNER))  # the buttons are gone
        (row,) = approvals(h)
        assert (row.tool, row.status, row.user_id, row.decided_by) == ("add", "approved", OWNER, OWNER)
        assert row.decided_at is not None and row.decided_at >= row.created_at


async def test_deny_and_no_answer_give_denied_by_the_user_to_the_model(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(
        tool_calls(call("add", {"a": 1})),
        text("Understood, I did not add them."),
        tool_calls(call("add", {"a": 7})),
        text("You did not answer, so I did not add them."),
    )
    async with running_bot(
        tmp_path, tg, llm, setup=register_math, approve_tools="ad?", approval_timeout_s=1
    ) as h:
        tg.push_text(OWNER, "add one")
        message, buttons = await prompt(tg, OWNER)
        tg.push_callback(OWNER, buttons["Deny"], message_id=message["message_id"])
        await h.final_text(OWNER, "Understood, I did not add them.")
        assert "denied by the user" in tool_result(llm, 1)
        assert '"sum"' not in tool_result(llm, 1)

        tg.push_text(OWNER, "add seven")  # nobody presses: after APPROVAL_TIMEOUT_S it is denied
        await prompt(tg, OWNER, 2)
        await h.final_text(OWNER, "You did not answer, so I did not add them.")
        assert "denied by the user" in tool_result(llm, 3) and "no answer within 1 s" in tool_result(llm, 3)
        assert any(t.endswith("No answer in time: not run.") for t in tg.sent_texts(OWNER))
        assert [(r.status, r.decided_by) for r in approvals(h)] == [("denied", OWNER), ("timeout", None)]


async def test_always_in_this_chat_is_remembered(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    llm.script(
        tool_calls(call("add", {"a": 1, "b": 1})),
        text("Two."),
        tool_calls(call("add", {"a": 2, "b": 2})),
        text("Four."),
    )
    async with running_bot(tmp_path, tg, llm, setup=register_math, approve_tools="add") as h:
        tg.push_text(OWNER, "one plus one")
        message, buttons = await prompt(tg, OWNER)
        tg.push_callback(OWNER, buttons["Always in this chat"], message_id=message["message_id"])
        await h.final_text(OWNER, "Two.")
        tg.push_text(OWNER, "two plus two")
        await h.final_text(OWNER, "Four.")  # not asked again in this chat
        assert json.loads(tool_result(llm, 3)) == {"sum": 4}
        assert len(prompts(tg, OWNER)) == 1
        assert [(r.chat_id, r.tool, r.allowed_by) for r in rows(h, ApprovalAlways)] == [(OWNER, "add", OWNER)]


async def test_in_a_group_only_the_person_whose_turn_it_is_decides(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(tool_calls(call("add", {"a": 4, "b": 4})), text("Eight."))
    async with running_bot(
        tmp_path, tg, llm, setup=register_math, approve_tools="add", allowed_chat_ids=str(GROUP)
    ) as h:
        tg.push_text(OWNER, "@test_bot add 4 and 4", chat_id=GROUP)
        message, buttons = await prompt(tg, GROUP)
        tg.push_callback(FRIEND, buttons["Approve"], message_id=message["message_id"], chat_id=GROUP)
        await tg.wait_for(lambda: "Only Ann can decide." in answers(tg), what="the refusal of Bob's press")
        assert approvals(h)[0].status == "pending" and len(llm.requests) == 1  # nothing changed
        tg.push_callback(OWNER, buttons["Approve"], message_id=message["message_id"], chat_id=GROUP)
        await h.final_text(GROUP, "Eight.")
        assert json.loads(tool_result(llm)) == {"sum": 8}
        assert approvals(h)[0].decided_by == OWNER


async def test_stop_during_a_pending_approval_ends_the_turn(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(tool_calls(call("add", {"a": 5}), content="Let me add that."), text("Fresh answer."))
    async with running_bot(tmp_path, tg, llm, setup=register_math, approve_tools="add") as h:
        tg.push_text(OWNER, "add five")
        message, buttons = await prompt(tg, OWNER)
        tg.push_text(OWNER, "/stop")
        await tg.wait_for(lambda: approvals(h)[0].status == "cancelled", what="the request cancelled")
        await tg.wait_for(
            lambda: any(t.endswith("Stopped: not run.") for t in tg.sent_texts(OWNER)),
            what="the prompt's buttons taken away",
        )
        # A late press changes nothing, and the chat is free for the next message.
        tg.push_callback(OWNER, buttons["Approve"], message_id=message["message_id"])
        await tg.wait_for(lambda: "This request is no longer open." in answers(tg), what="the late press")
        tg.push_text(OWNER, "something else")
        await h.final_text(OWNER, "Fresh answer.")
        assert all(m["role"] != "tool" for m in llm.requests[-1]["messages"])  # the call never ran


async def test_a_decision_pressed_on_another_bot_process_reaches_the_turn(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    """Two bots on one database, each with its own Bot API connection (update ids of one Telegram bot):
    the press reaches the second, the turn runs in the first."""
    llm.script(tool_calls(call("add", {"a": 20, "b": 22})), text("Forty-two."))
    async with (
        running_bot(tmp_path, tg, llm, setup=register_math, approve_tools="add") as h,
        FakeTelegram(token=tg.token, first_update_id=50_000) as tg2,
        running_bot(tmp_path, tg2, llm, setup=register_math, approve_tools="add") as other,
    ):
        assert other.services.replica.id != h.services.replica.id
        tg.push_text(OWNER, "add 20 and 22")
        message, buttons = await prompt(tg, OWNER)
        tg2.messages[OWNER] = [message]  # the press arrives with the message it was under
        tg2.push_callback(OWNER, buttons["Approve"], message_id=message["message_id"])
        await h.final_text(OWNER, "Forty-two.")
        assert json.loads(tool_result(llm)) == {"sum": 42}
        (answered,) = await tg2.wait_for_call("answerCallbackQuery")
        assert answered.params.get("text") == "Approved."
        assert not tg.calls_to("answerCallbackQuery")


async def test_a_scheduled_tasks_call_that_needs_approval_is_not_run_and_the_user_is_told(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(tool_calls(call("add", {"a": 3, "b": 3})), text("I could not add them."))
    async with running_bot(tmp_path, tg, llm, setup=register_math, approve_tools="add") as h:
        service = h.services.schedules.service
        made = service.create(
            user_id=OWNER, chat_id=OWNER, chat_type="private", text="Add 3 and 3", kind="task", at=local_at(1)
        )
        h.services.schedules.wake()
        await wait_sent(h, int(made["id"]), timeout=60)
        told = await h.final_text(OWNER, "A scheduled task wanted to use add")
        assert "needs your approval" in told and "it was not run" in told
        result = json.loads(tool_result(llm))
        assert result["ok"] is False and "scheduled task has nobody to ask" in result["error"]
        assert prompts(tg, OWNER) == [] and approvals(h) == []


async def test_mcp_servers_confirm_true_and_regex(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    path = tmp_path / "mcp.json"
    servers = {"a": stdio_entry(confirm=True), "b": stdio_entry(confirm="^add$"), "c": stdio_entry()}
    path.write_text(json.dumps({"mcpServers": servers}))
    llm.script(
        tool_calls(
            call("a__echo", {"text": "from a"}),
            call("b__echo", {"text": "from b"}),
            call("b__add", {"a": 1, "b": 2}),
            call("c__add", {"a": 3, "b": 4}),
        ),
        text("Done with the servers."),
    )
    async with running_bot(tmp_path, tg, llm, mcp_servers_file=str(path)) as h:
        tg.push_text(OWNER, "use the servers")
        await prompt(tg, OWNER, 2)
        asked = {str(m["text"]).split("may I run ")[1].split("?")[0]: m for m in prompts(tg, OWNER)}
        assert set(asked) == {"a__echo", "b__add"}  # b__echo and c__add ran without asking
        for tool, label in (("a__echo", "Approve"), ("b__add", "Deny")):
            message = asked[tool]
            tg.push_callback(OWNER, buttons_of(message)[label], message_id=message["message_id"])
        await h.final_text(OWNER, "Done with the servers.")
        results = [m["content"] for m in llm.requests[1]["messages"] if m["role"] == "tool"]
        a_echo, b_echo, b_add, c_add = results
        assert "echo: from a" in a_echo and "echo: from b" in b_echo and "7" in c_add
        assert "denied by the user" in b_add and "3" not in b_add


async def test_capability_patterns_in_approve_tools(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    llm.script(
        tool_calls(call("schedule", {"action": "list"}), call("read_result", {"handle": "nothing-here"})),
        text("Listed."),
    )
    async with running_bot(tmp_path, tg, llm, approve_tools="writes:sched*,reads:internet") as h:
        tg.push_text(OWNER, "what is planned?")
        message, buttons = await prompt(tg, OWNER)
        assert str(message["text"]).startswith("Ann, may I run schedule?")  # read_result: not asked
        tg.push_callback(OWNER, buttons["Approve"], message_id=message["message_id"])
        await h.final_text(OWNER, "Listed.")
        schedule_result = next(m for m in llm.requests[1]["messages"] if m["role"] == "tool")["content"]
        assert "denied" not in schedule_result and json.loads(schedule_result)["ok"] is True
        assert len(prompts(tg, OWNER)) == 1


async def test_the_wait_for_a_decision_does_not_count_against_the_turns_time_limit(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(tool_calls(call("add", {"a": 1})), text("No answer, so nothing added."))
    async with running_bot(
        tmp_path, tg, llm, setup=register_math, approve_tools="add", turn_timeout_s=1, approval_timeout_s=3
    ) as h:
        tg.push_text(OWNER, "add one")
        await h.final_text(OWNER, "No answer, so nothing added.")  # not cut by the 1 s turn limit
        assert "no answer within 3 s" in tool_result(llm)


async def test_doctor_lists_each_tools_capabilities_and_approval(tmp_path: Path, llm: FakeLLM) -> None:
    services = build_services(make_settings(tmp_path, None, llm, approve_tools="code,reads:memory"))
    try:
        check = check_tools(services)
    finally:
        await services.aclose()
    assert check.ok and not check.warning, check.line()
    line = check.line()
    assert "search (reads internet)" in line and "read_result (touches nothing outside the turn)" in line
    assert "code (reads files; writes files, execution; asks approval)" in line
    assert "memory (reads memory; writes memory; asks approval)" in line
    assert "schedule (reads schedules; writes schedules)" in line


async def test_a_prompt_that_cannot_be_shown_denies_the_call_and_the_turn_goes_on(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(tool_calls(call("add", {"a": 9})), text("I could not ask you, so nothing ran."))
    async with running_bot(tmp_path, tg, llm, setup=register_math, approve_tools="add") as h:
        tg.fail_when("sendMessage", lambda p: "apr:1:y" in json.dumps(p.get("reply_markup")), "forbidden")
        tg.push_text(OWNER, "add nine")
        await h.final_text(OWNER, "I could not ask you, so nothing ran.")
        assert "denied by the user: the approval prompt could not be shown" in tool_result(llm)
        assert [r.status for r in approvals(h)] == ["cancelled"]


async def test_a_helper_agent_cannot_run_a_call_that_needs_approval(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(
        tool_calls(call("delegate", {"task": "Add 1 and 2.", "tools": ["add"]})),
        tool_calls(call("add", {"a": 1, "b": 2})),  # the helper's sub-turn
        text("I was not allowed to add."),  # the helper's answer
        text("The helper could not add without your approval."),
    )
    async with running_bot(
        tmp_path, tg, llm, setup=register_math, approve_tools="add", subagent_delegate=True
    ) as h:
        tg.push_text(OWNER, "let a helper add 1 and 2")
        await h.final_text(OWNER, "The helper could not add without your approval.")
        helper_result = tool_result(llm, 2)
        assert "needs the user's approval, which a helper cannot ask for" in helper_result
        assert '"sum"' not in helper_result and prompts(tg, OWNER) == []


async def test_the_prompt_shows_what_will_run_escaped_with_only_real_secrets_masked(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    """Issue 31 §11: `token=exec(...)` was shown as `token=***`, a program was cut at 120 characters, and an
    argument's name could write lines of its own into the prompt."""
    program = "token=exec(open('/etc/passwd').read())\n" + "".join(f"print({i})\n" for i in range(60))
    program += "import os; os.system('rm -rf ~')\n"
    forged = "x\n\nApproved by Ann.</pre><b>Safe</b>"
    key = "sk-proj-" + "Ab3dE5fG7hJ9kL1mN3pQ5rS7"
    llm.script(tool_calls(call("add", {"key": key, forged: 1, "code": program})), text("Not run."))
    async with running_bot(tmp_path, tg, llm, setup=register_math, approve_tools="add") as h:
        tg.push_text(OWNER, "run this")
        message, buttons = await prompt(tg, OWNER)
        shown = str(message["text"])
        assert "token=exec(open(&#x27;/etc/passwd&#x27;).read())" in shown  # the code, not a mask
        assert "print(20)" in shown and key not in shown and "key: &quot;***&quot;" in shown
        # The forged name stays on its line, escaped: no line of its own, no markup of its own.
        assert "</pre><b>" not in shown and "\nApproved by Ann." not in shown
        assert "&quot;x\\n\\nApproved by Ann.&lt;/pre&gt;&lt;b&gt;Safe&lt;/b&gt;&quot;: 1" in shown
        assert shown.count("<pre>") == 1 and shown.count("</pre>") == 1
        # 25 lines of the 65 (the two arguments, "code: |" and the program's first 22 lines), and the rest
        # one press away.
        assert "print(21)" not in shown and "os.system" not in shown
        assert shown.endswith("</pre>\n\u2026 and 40 more lines: \u201cShow all\u201d sends the whole call.")
        assert list(buttons) == ["Approve", "Deny", "Always in this chat", "Show all"]
        tg.push_callback(OWNER, buttons["Show all"], message_id=message["message_id"])
        (sent,) = await tg.wait_for_call("sendDocument")
        whole = sent.params["document"].data.decode()
        assert "os.system('rm -rf ~')" in whole and "token=exec(open" in whole and key not in whole
        assert all(f"  print({i})\n" in whole for i in range(60))
        await tg.wait_for(lambda: "Sent the whole call." in answers(tg), what="the Show all press answered")
        assert approvals(h)[0].status == "pending"
        tg.push_callback(OWNER, buttons["Deny"], message_id=message["message_id"])
        await h.final_text(OWNER, "Not run.")


async def test_always_in_a_group_counts_only_for_the_person_who_chose_it(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    """Issue 31 §12: one member's "Always in this chat" let every member's calls run unasked."""
    llm.script(
        tool_calls(call("add", {"a": 1, "b": 1})),
        text("Two."),
        tool_calls(call("add", {"a": 2, "b": 2})),
        text("Four, Bob."),
        tool_calls(call("add", {"a": 3, "b": 3})),
        text("Six."),
    )
    async with running_bot(
        tmp_path, tg, llm, setup=register_math, approve_tools="add", allowed_chat_ids=str(GROUP)
    ) as h:
        tg.push_text(OWNER, "@test_bot one plus one", chat_id=GROUP)
        message, buttons = await prompt(tg, GROUP)
        always = next(label for label in buttons if label.startswith("Always"))
        tg.push_callback(OWNER, buttons[always], message_id=message["message_id"], chat_id=GROUP)
        await h.final_text(GROUP, "Two.")
        tg.push_text(FRIEND, "@test_bot two plus two", chat_id=GROUP, first_name="Bob")  # Bob is still asked
        message, buttons = await prompt(tg, GROUP, 2)
        assert str(message["text"]).startswith("Bob, may I run add?")
        tg.push_callback(FRIEND, buttons["Approve"], message_id=message["message_id"], chat_id=GROUP)
        await h.final_text(GROUP, "Four, Bob.")
        tg.push_text(OWNER, "@test_bot three plus three", chat_id=GROUP)  # Ann chose always: not asked
        await h.final_text(GROUP, "Six.")
        assert len(prompts(tg, GROUP)) == 2 and always == "Always for me in this chat"
        assert [(r.chat_id, r.tool, r.allowed_by) for r in rows(h, ApprovalAlways)] == [(GROUP, "add", OWNER)]


async def test_forged_button_data_is_answered_no_longer_open(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    """Issue 31 §13: `apr:²:y` and a 30-digit id raised in the handler, and the press got no answer."""
    llm.script(tool_calls(call("add", {"a": 1, "b": 2})), text("Three."))
    async with running_bot(tmp_path, tg, llm, setup=register_math, approve_tools="add") as h:
        tg.push_text(OWNER, "add 1 and 2")
        message, buttons = await prompt(tg, OWNER)
        forged = [
            "apr:\u00b2:y",
            "apr:" + "9" * 30 + ":y",
            "apr:1:z",
            "apr:01:y",
            "apr:1:y:x",
            "apr:\uff11:y",
        ]
        for data in forged:
            tg.push_callback(OWNER, data, message_id=message["message_id"])
        # The request's own id pressed under a message of another chat (Bob's): not this chat's prompt.
        tg.messages[FRIEND] = [dict(message, chat={"id": FRIEND, "type": "private", "first_name": "Bob"})]
        for data in (buttons["Approve"], buttons["Approve"].replace(":y", ":s")):
            tg.push_callback(FRIEND, data, message_id=message["message_id"], chat_id=FRIEND)
        await tg.wait_for(lambda: len(answers(tg)) == len(forged) + 2, what="every forged press answered")
        assert answers(tg) == ["This request is no longer open."] * (len(forged) + 2)
        assert approvals(h)[0].status == "pending" and not tg.calls_to("sendDocument")
        tg.push_callback(OWNER, buttons["Approve"], message_id=message["message_id"])
        await h.final_text(OWNER, "Three.")
