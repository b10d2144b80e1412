"""The bot's commands in one list, so /help, the Telegram command menus and the terminal never disagree."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from core_tools.sessions import NewSession


class Audience(StrEnum):
    """Who sees a command: each has its own /help and (in Telegram) its own command menu."""

    PRIVATE = "private"  # an allowed user in a private chat
    OWNER = "owner"  # the owner's private chat: the private list and the owner's commands
    GROUP = "group"  # a group chat
    TERMINAL = "terminal"  # `python -m bot chat`, where buttons become typed commands


_TELEGRAM = frozenset({Audience.PRIVATE, Audience.OWNER, Audience.GROUP})
_EVERYWHERE = frozenset(Audience)
_PRIVATE = frozenset({Audience.PRIVATE, Audience.OWNER, Audience.TERMINAL})  # never shown to a group
_PRIVATE_TELEGRAM = frozenset({Audience.PRIVATE, Audience.OWNER})  # Telegram opens web apps in private chats
_OWNER = frozenset({Audience.OWNER, Audience.TERMINAL})  # the terminal user is the owner
_TERMINAL = frozenset({Audience.TERMINAL})


@dataclass(frozen=True)
class Command:
    """One slash command (a name may have several lines, e.g. its owner-only or terminal form)."""

    name: str
    args: str
    description: str
    audiences: frozenset[Audience] = _EVERYWHERE


COMMANDS: list[Command] = [
    Command("start", "", "introduction", frozenset({Audience.PRIVATE, Audience.OWNER})),
    Command("help", "", "this list of commands"),
    Command("newsession", "[name]", "start a new conversation session"),
    Command("stop", "", "stop the answer being written (also the Stop button under it)", _TELEGRAM),
    Command("stop", "", "stop the answer being written (also Ctrl-C)", _TERMINAL),
    Command("retry", "", "answer your last message again"),
    Command("model", "", "choose the language model of this chat", _TELEGRAM),
    Command("model", "[NUMBER]", "the language model of this chat; choose another by its number", _TERMINAL),
    Command(
        "memory",
        "[search TEXT | recent | forget ID | history ID | undo]",
        "what I remember about you",
        _PRIVATE,
    ),
    Command("timezone", "[Area/City]", "your time zone, for dates and the daily session rollover", _PRIVATE),
    Command("reminders", "", "your reminders and scheduled tasks, with cancel buttons", _TELEGRAM),
    Command(
        "reminders",
        "[cancel ID | resume ID | snooze FIRING [MINUTES] | done FIRING]",
        "your reminders and scheduled tasks; cancel or resume one, snooze or finish a fired one",
        _TERMINAL,
    ),
    Command(
        "checkin",
        "[daily HH:MM | weekly DAY HH:MM] [digest] | off",
        "a check-in at a time you choose, sent only when something is due",
        _PRIVATE_TELEGRAM,
    ),
    Command("usage", "[today|week|month]", "your tokens, estimated cost and tool use", _PRIVATE),
    Command("usage", "all [today|week|month]", "owner: everyone's usage", _OWNER),
    Command("budget", "USER_ID daily|monthly AMOUNT", "owner: set a user's usage cap", _OWNER),
    Command("codestats", "[days]", "statistics of your code runs (default: last 7 days)", _PRIVATE),
    Command("codefailures", "[n]", "your last failed code runs (default 5, at most 20)", _PRIVATE),
    Command("app", "", "open the app: memories, reminders, usage, code runs and files", _PRIVATE_TELEGRAM),
    Command(
        "export",
        "",
        "everything I store about you, as one archive",
        frozenset({Audience.PRIVATE, Audience.OWNER}),
    ),
    Command(
        "forget_me",
        "",
        "delete everything I store about you (asks first)",
        frozenset({Audience.PRIVATE, Audience.OWNER}),
    ),
    Command("quit", "", "leave the terminal chat (also Ctrl-D)", _TERMINAL),
]

# Shown on the bot's profile and in an empty chat; set at start only where the operator (BotFather) set none.
DESCRIPTION = (
    "A private personal assistant. Write to me in plain words, or send a voice note, a photo or a file: "
    "I can search the web, run code, remember things for you and remind you on time. Only the people my "
    "operator allows are served; anyone else is told their Telegram user id."
)
SHORT_DESCRIPTION = "A private assistant: web search, code, memory and reminders."

INTRO = (
    "I am your personal assistant. Write to me in plain words; I can search the web, run code and "
    "remember things for you."
)


def audience_of(chat_type: str, is_owner: bool) -> Audience:
    """The audience of a Telegram chat: a group's members, the owner in private, or another user."""
    if chat_type != "private":
        return Audience.GROUP
    return Audience.OWNER if is_owner else Audience.PRIVATE


def commands_for(audience: Audience) -> list[Command]:
    """The commands an audience sees, in the order of COMMANDS."""
    return [c for c in COMMANDS if audience in c.audiences]


def menu_for(audience: Audience) -> list[tuple[str, str]]:
    """(command, description) pairs for a Telegram command menu: one entry per name, its first line."""
    seen: dict[str, str] = {}
    for c in commands_for(audience):
        seen.setdefault(c.name, c.description)
    return list(seen.items())


def help_text(audience: Audience = Audience.PRIVATE) -> str:
    """The /help message of an audience."""
    lines = [INTRO, "", "Commands:"]
    for c in commands_for(audience):
        usage = f"/{c.name} {c.args}".rstrip()
        lines.append(f"{usage} - {c.description}")
    return "\n".join(lines)


def new_session_text(result: NewSession) -> str:
    """What /newsession answers."""
    lines = [f"Started a new session: {result.new.name}."]
    if result.carried:
        lines.append(f"Carried forward as a short-term memory:\n{result.carried}")
    elif result.old is None:
        lines.append("The previous session was empty, so there was nothing to carry forward.")
    return "\n".join(lines)
