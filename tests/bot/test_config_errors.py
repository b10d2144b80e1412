"""Start-up with bad settings, through the real `python -m bot`: every problem at once, one plain line each
naming the variable and what to put there, "missing" for an empty required value."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.processes import bot_env, run_bot

pytestmark = pytest.mark.slow  # real `python -m bot` processes

PYDANTIC_WORDING = ("Input should", "String should", "Value error", "validation error", "pydantic")


def by_variable(err: str) -> dict[str, str]:
    """The error lines by the variable they start with; every line must be a configuration error."""
    lines = err.strip().splitlines()
    assert all(line.startswith("Configuration error: ") for line in lines), err
    found = {line.removeprefix("Configuration error: ").split(" ", 1)[0]: line for line in lines}
    assert len(found) == len(lines), f"one line per variable:\n{err}"
    return found


async def test_every_bad_setting_is_reported_at_once(tmp_path: Path) -> None:
    # Some from .env, some from the environment, as an operator's mix would be.
    (tmp_path / ".env").write_text(
        "OPENAI_API_KEY=\nCODE_MEMORY_MB=lots\nLLM_VISION=maybe\nSEARCH_PROVIDER=brave\n", encoding="utf-8"
    )
    env = bot_env(
        tmp_path,
        ALLOWED_USER_IDS="12,ann",
        TELEGRAM_WEBHOOK_PORT="70000",
        CODE_PYTHON_ENV="/usr",
        LLM_MODEL="",
    )
    code, out, err = await run_bot(tmp_path, env=env)
    assert code == 2, out + err
    assert "Traceback" not in out + err
    assert not any(words in err for words in PYDANTIC_WORDING), err
    lines = by_variable(err)
    assert set(lines) == {
        "OPENAI_API_KEY",
        "LLM_MODEL",
        "TELEGRAM_BOT_TOKEN",
        "ALLOWED_USER_IDS",
        "CODE_MEMORY_MB",
        "LLM_VISION",
        "TELEGRAM_WEBHOOK_PORT",
        "CODE_PYTHON_ENV",
        "SEARCH_PROVIDER",
    }, err
    assert (
        "OPENAI_API_KEY is missing: the API key of your OpenAI-compatible endpoint" in lines["OPENAI_API_KEY"]
    )
    assert "LLM_MODEL is empty: the model name your endpoint serves" in lines["LLM_MODEL"]
    assert "(or delete the line: gpt-4o-mini)" in lines["LLM_MODEL"]
    assert "TELEGRAM_BOT_TOKEN is missing: put the token @BotFather gave you" in lines["TELEGRAM_BOT_TOKEN"]
    assert "'ann' is not a numeric Telegram user id" in lines["ALLOWED_USER_IDS"]
    assert lines["CODE_MEMORY_MB"] == (
        "Configuration error: CODE_MEMORY_MB is not a whole number: put a whole number of at least 64 "
        "(or delete the line: 512)."
    )
    assert "LLM_VISION is none of the allowed values: put one of auto, on, off" in lines["LLM_VISION"]
    assert (
        "TELEGRAM_WEBHOOK_PORT is above 65535: the port the bot listens on" in lines["TELEGRAM_WEBHOOK_PORT"]
    )
    assert "/usr is not a directory of its own" in lines["CODE_PYTHON_ENV"]
    assert "includes brave but BRAVE_API_KEY is not set" in lines["SEARCH_PROVIDER"]


async def test_an_empty_value_with_a_default_says_empty_and_the_default(tmp_path: Path) -> None:
    env = bot_env(
        tmp_path, OPENAI_API_KEY="sk-x", TELEGRAM_BOT_TOKEN="1:x", ALLOWED_USER_IDS="1", TURN_TIMEOUT_S=" "
    )
    code, _, err = await run_bot(tmp_path, env=env)
    assert code == 2
    assert by_variable(err) == {
        "TURN_TIMEOUT_S": "Configuration error: TURN_TIMEOUT_S is empty: put a number above 0 "
        "(or delete the line: 300.0)."
    }
