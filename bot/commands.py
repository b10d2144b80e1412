"""The bot's commands in one list, so /help and the Telegram command menu never disagree."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Command:
    """One slash command."""

    name: str
    args: str
    description: str


COMMANDS: list[Command] = [
    Command("start", "", "introduction"),
    Command("help", "", "this list of commands"),
    Command("newsession", "[name]", "start a new conversation session"),
    Command("stop", "", "stop the answer being written (also the Stop button under it)"),
    Command("retry", "", "answer your last message again"),
    Command("model", "", "choose the language model of this chat"),
    Command("memory", "[search TEXT | recent | forget ID | history ID | undo]", "what I remember about you"),
    Command("timezone", "[Area/City]", "your time zone, for dates and the daily session rollover"),
    Command("reminders", "", "your reminders and scheduled tasks, with cancel buttons"),
    Command("usage", "[today|week|month]", "your tokens, estimated cost and tool use"),
    Command("budget", "USER_ID daily|monthly AMOUNT", "owner: set a user's usage cap"),
    Command("codestats", "[days]", "statistics of your code runs (default: last 7 days)"),
    Command("codefailures", "[n]", "your last failed code runs (default 5, at most 20)"),
]


def help_text() -> str:
    """The /help message."""
    lines = [
        "I am your personal assistant. Write to me in plain words; I can search the web, run code and "
        "remember things for you.",
        "",
        "Commands:",
    ]
    for c in COMMANDS:
        usage = f"/{c.name} {c.args}".rstrip()
        lines.append(f"{usage} - {c.description}")
    return "\n".join(lines)
