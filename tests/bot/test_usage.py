"""/usage and /budget end to end: the real PTB and openai clients against the loopback fakes, real SQLite."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from bot.runtime.services import Services
from bot.texts.usage import parse_budget_change
from core_tools.types import ToolContext
from core_tools.usage.caps import Caps
from core_tools.usage.prices import ModelPrice
from core_tools.usage.service import UsageService
from db.engine import make_sessionmaker
from db.usage import UsageQueries
from tests.support.fakes.openai_api import FakeLLM, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import FRIEND, OWNER, Harness, running_bot

APOLOGY = "something went wrong"


@dataclass
class UsageHarness(Harness):
    """The running bot with a usage service of known prices installed."""

    usage: UsageService

    async def reply(self, chat_id: int, contains: str, timeout: float = 10.0) -> str:
        """Wait for a message in the chat that contains `contains`."""
        return await self.final_text(chat_id, contains, timeout)


async def lookup(ctx: ToolContext, q: str) -> dict[str, str]:
    """Look something up."""
    return {"result": f"about {q}"}


@asynccontextmanager
async def usage_bot(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, caps: Caps | None = None
) -> AsyncIterator[UsageHarness]:
    """The harness's running bot with a usage service of known prices and caps, and a test-only tool."""
    svc: UsageService | None = None

    def setup(services: Services) -> None:
        nonlocal svc
        services.registry.register(lookup)
        svc = UsageService(
            UsageQueries(make_sessionmaker(services.engine), services.engine),
            prices={"fake-model": ModelPrice(1.0, 2.0)},
            defaults=caps or Caps(),
            owner_id=OWNER,
            clock=lambda: datetime.now(UTC),
            notifier=services.notifier,
        )
        services.llm.budget = svc
        services.agent.budget = svc
        services.usage_service = svc

    async with running_bot(tmp_path, tg, llm, setup=setup) as h:
        assert svc is not None
        yield UsageHarness(tg, llm, h.app, h.settings, svc)


async def test_usage_shows_tokens_cost_turns_tools_and_purposes(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(tool_calls(call("lookup", {"q": "x"})), text("Found it.", usage=False))
    async with usage_bot(tmp_path, tg, llm) as h:
        tg.push_text(OWNER, "look up x")
        await h.reply(OWNER, "Found it.")
        out = await h.command(OWNER, "/usage", "Usage today")
        assert "Tokens: ~" in out and "Estimated cost: $0.0" in out
        assert "Turns: 1 · LLM calls: 2" in out and "Tool calls: 1: lookup 1" in out
        assert "By purpose:\n  chat: 2 calls" in out and "their tokens are estimated" in out
        week = await h.command(OWNER, "/usage week", "Usage this week")
        assert "Turns: 1" in week
        empty = await h.command(FRIEND, "/usage month", "Usage this month")
        assert "Nothing yet." in empty


async def test_bad_arguments_and_owner_only_commands(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    async with usage_bot(tmp_path, tg, llm) as h:
        assert "Usage: /usage [today|week|month]" in await h.command(OWNER, "/usage yesterday", "Usage:")
        assert "Usage: /usage" in await h.command(OWNER, "/usage today week", "Usage:")
        await h.command(FRIEND, "/usage all", "Only the owner can see everyone's usage")
        await h.command(FRIEND, "/budget 222 daily 2", "Only the owner")
        for bad in ("/budget x", "/budget 222 weekly 2", "/budget 222 daily lots", "/budget 222 daily $5k"):
            assert "Usage: /budget USER_ID daily|monthly AMOUNT" in await h.command(OWNER, bad, "Usage:")
        assert h.usage.budget_overrides() == []
        assert llm.requests == []


async def test_owner_sets_a_cap_and_sees_everyone(tmp_path: Path, tg: FakeTelegram, llm: FakeLLM) -> None:
    llm.default = text("hello")
    async with usage_bot(tmp_path, tg, llm) as h:
        tg.push_text(FRIEND, "hi", first_name="Bob")
        await h.reply(FRIEND, "hello")
        tg.push_text(OWNER, "hi")
        await h.reply(OWNER, "hello")
        everyone = await h.command(OWNER, "/usage all", "Usage of all users today")
        assert f"Ann ({OWNER}): " in everyone and f"Bob ({FRIEND}): " in everyone and "Total: " in everyone
        done = await h.command(OWNER, f"/budget {FRIEND} daily 2.00", "Done.")
        assert f"Bob ({FRIEND}): daily cost: $0.0" in done and "of $2.00" in done
        done = await h.command(OWNER, f"/budget {FRIEND} monthly 50k tokens", "Done.")
        assert "monthly tokens: " in done and "of 50.0k tokens" in done
        listing = await h.command(OWNER, "/budget", "Default caps:")
        assert f"Bob ({FRIEND})" in listing
        await h.command(OWNER, f"/budget {FRIEND} daily default", "Done.")
        assert {(b.period, b.kind) for b in h.usage.budget_overrides()} == {("monthly", "tokens")}


async def test_over_budget_turn_sends_nothing_and_owner_is_told_once(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.default = text("hello")
    async with usage_bot(tmp_path, tg, llm) as h:
        tg.push_text(FRIEND, "hi", first_name="Bob")
        await h.reply(FRIEND, "hello")
        await h.command(OWNER, f"/budget {FRIEND} daily 10 tokens", "Done.")
        sent = len(llm.requests)
        for i in range(2):
            tg.push_text(FRIEND, f"again {i}", first_name="Bob")
            want = 2 + i
            await h.tg.wait_for(lambda want=want: len(tg.sent_texts(FRIEND)) >= want, what="a refusal")
        assert len(llm.requests) == sent  # the fake LLM received nothing
        notice = await h.reply(OWNER, "reached the daily tokens cap")
        assert f"Bob ({FRIEND})" in notice
        await h.usage.drain()
        assert sum("reached the daily" in t for t in tg.sent_texts(OWNER)) == 1
        out = await h.command(FRIEND, "/usage", "Usage today")
        assert "Daily tokens cap: " in out and "reached" in out and "refused (cap) 2" in out
        # Nothing the user wrote was lost: once the cap is lifted, the model sees the refused messages too.
        await h.command(OWNER, f"/budget {FRIEND} daily none", "Done.")
        tg.push_text(FRIEND, "and now?", first_name="Bob")
        await h.tg.wait_for(lambda: len(llm.requests) == sent + 1, what="the next request")
        said = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "user"]
        assert said == ["hi", "again 0", "again 1", "and now?"]


async def test_refusal_says_which_cap_and_when_it_resets(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    async with usage_bot(tmp_path, tg, llm, caps=Caps(daily_usd=0.0)) as h:
        tg.push_text(FRIEND, "hi")
        refusal = await h.reply(FRIEND, "Usage cap reached")
        assert "daily cost cap is $0 and $0 is spent today" in refusal and "resets at 00:00 (UTC)" in refusal
        assert llm.requests == [] and APOLOGY not in " ".join(tg.sent_texts(FRIEND))


def test_parse_budget_change() -> None:
    p = parse_budget_change
    assert p(["5", "daily", "2.00"]) == p(["5", "daily", "$2"]) == p(["5", "DAILY", "2", "usd"])
    assert p(["5", "daily", "2.00"]) is not None and p(["5", "daily", "2.00"]).kind == "cost"  # type: ignore[union-attr]
    change = p(["5", "monthly", "1.5m"])
    assert change is not None and (change.kind, change.limit) == ("tokens", 1_500_000)
    change = p(["5", "monthly", "50000", "tokens"])
    assert change is not None and (change.kind, change.limit) == ("tokens", 50_000)
    change = p(["5", "daily", "off", "tokens"])
    assert change is not None and (change.action, change.kind) == ("off", "tokens")
    change = p(["5", "daily", "default"])
    assert change is not None and (change.action, change.kind) == ("default", None)
    for bad in (["5", "daily"], ["x", "daily", "2"], ["5", "daily", "-2"], ["5", "daily", "off", "euro"]):
        assert p(bad) is None
