"""Odd command arguments (Unicode digits, huge numbers, odd names) get the usage line, not an apology."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config.args import parse_decimal, parse_int, parse_user_id
from tests.support.fakes.openai_api import FakeLLM, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, running_bot

APOLOGY = "something went wrong"
STATS = "Usage: /codestats [days]"
FAILURES = "Usage: /codefailures [n]"
BUDGET = "Usage: /budget USER_ID daily|monthly AMOUNT"
TIMEZONE = "Usage: /timezone Area/City"

ODD = [
    ("/codestats ³", STATS),
    ("/codestats ٣", STATS),  # an Arabic-Indic digit: isdigit() is True, int() accepts it
    ("/codestats 99999999999999999999999", STATS),
    ("/codefailures ²", FAILURES),
    ("/codefailures -1", FAILURES),
    ("/budget ²²²", BUDGET),
    ("/budget ²²² daily 5", BUDGET),
    ("/budget 99999999999999999999999 daily 5", BUDGET),
    ("/budget 99999999999999999999999", BUDGET),
    ("/budget 222 daily ²", BUDGET),
    ("/budget 222 daily " + "9" * 400, BUDGET),
    ("/budget 222 monthly 99999999999999999999999k tokens", BUDGET),
    ("/budget 222 daily 1e999", BUDGET),
    ("/timezone " + "x" * 300, TIMEZONE),
    ("/timezone Europe", TIMEZONE),
]


async def test_odd_arguments_get_the_usage_line_and_the_bot_keeps_serving(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("Still here."))
    async with running_bot(tmp_path, tg, llm) as h:
        for command, usage in ODD:
            answer = await h.command(OWNER, command, "Usage:")
            assert usage in answer, (command, answer)
        assert h.services.usage_service.budget_overrides() == []
        tg.push_text(OWNER, "are you alive?")
        await h.final_text(OWNER, "Still here.")
        assert not any(APOLOGY in t for t in tg.sent_texts(OWNER))
        # good input still works
        assert "No code runs in the last 3 days." in await h.command(OWNER, "/codestats 3", "No code runs")
        assert "Done." in await h.command(OWNER, "/budget 222 daily 2.50", "Done.")


@pytest.mark.parametrize("value", ["³", "٣", "1.5", "-1", "+1", " 1", "1 ", "", "0x10", "1_000", "9" * 19])
def test_parse_int_takes_only_ascii_digits_in_bounds(value: str) -> None:
    assert parse_int(value, 0, 10**30) is None


def test_parsers_accept_plain_numbers_within_bounds() -> None:
    assert parse_int("42", 1, 100) == 42 and parse_int("101", 1, 100) is None
    assert parse_decimal("2.50", 0, 10) == 2.5 and parse_decimal("11", 0, 10) is None
    assert parse_decimal("inf", 0, 10) is None and parse_decimal("1e3", 0, 10**6) is None
    assert parse_user_id("123456789") == 123456789 and parse_user_id("0") is None
