"""How a turn ended, in the words every front end shows (the Telegram chat, the terminal), and what the
runtime answers to /stop and /retry."""

from __future__ import annotations

from core_tools.errors import BudgetExceeded, LLMUnavailable

STOP_NOTES = {
    "chain_limit": "(I stopped using tools: the limit of tool calls for one message was reached.)",
    "repeat_guard": "(I stopped using tools: I was repeating the same call.)",
    "budget": "(I stopped using tools: your usage cap is reached; /usage shows it.)",
}
STOPPED_MARK = "(stopped)"
NOTHING_RUNS = "Nothing is running in this chat, so there is nothing to stop."
NOT_YOURS = "Only the person who asked, or the bot's owner, can {action} this."
NO_ANSWER = "(I have no answer to that.)"
NO_VISION_NOTE = "(The model I use cannot see images, so I only read the text that came with it.)"
STILL_ANSWERING = "I am still answering. Use /stop first, or wait until I am done, then /retry."
NOTHING_TO_RETRY = "There is nothing to retry in this session yet."


def turn_failure_text(exc: BaseException) -> str:
    """What the user is told when a turn ended with an error (their message is kept)."""
    if isinstance(exc, BudgetExceeded):
        return str(exc)
    if isinstance(exc, LLMUnavailable):
        return (
            f"Sorry, I could not get an answer: {exc}. Your message is saved; please try again in a moment."
        )
    if isinstance(exc, TimeoutError):
        return (
            "Sorry, that took too long and I stopped. Your message is saved; try again, "
            "or ask for something smaller."
        )
    return "Sorry, something went wrong on my side. It is logged; please try again."


def interrupted_text(content: str) -> str:
    """What a chat is told about a message whose turn a stopped process could not finish."""
    snippet = content if len(content) <= 80 else content[:77] + "..."
    return (
        f"I was restarted while answering your message \u201c{snippet}\u201d and could not finish. "
        "Please send it again if you still need an answer."
    )
