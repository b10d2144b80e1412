"""The commands of the terminal chat: the same services and wording as in Telegram, with typed commands
where Telegram has buttons (/model NUMBER, /reminders cancel ID, /reminders snooze FIRING, ...)."""

from __future__ import annotations

import asyncio

from bot.config.args import parse_int
from bot.runtime.services import Services
from bot.texts.catalog import Audience, help_text
from bot.texts.code import codefailures_replies, codestats_reply
from bot.texts.memory import memory_reply, timezone_reply
from bot.texts.models import ModelChoice
from bot.texts.schedules import cancel_note, listing_text, resume_note, snooze_note
from bot.texts.usage import budget_reply, usage_reply
from core_tools.schedule.rules import ScheduleInputError

REMINDERS_USAGE = (
    "Usage: /reminders (the list), /reminders cancel ID, /reminders resume ID, "
    "/reminders snooze FIRING [MINUTES], /reminders done FIRING"
)
REMINDERS_HINT = "Cancel one with /reminders cancel ID; resume a paused one with /reminders resume ID."
MODEL_HINT = "Choose one with /model NUMBER."
MAX_ID = 2**62
MAX_SNOOZE_MINUTES = 7 * 24 * 60


def model_reply(choice: ModelChoice, chat_id: int, user_id: int, args: list[str]) -> str:
    """/model: the chat's model and the others, numbered; /model NUMBER (or NAME) chooses one."""
    if not args:
        text, labels = choice.menu(chat_id)
        if not labels:
            return text
        lines = [f"{i}. {label}" for i, label in enumerate(labels, start=1)]
        return "\n".join([text, *lines, MODEL_HINT])
    number = parse_int(args[0], 1, len(choice.models)) if len(args) == 1 else None
    named = args[0] if len(args) == 1 and args[0] in choice.models else None
    model = named or (choice.models[number - 1] if number is not None else None)
    if model is None:
        return f"That is not one of the models offered. {MODEL_HINT} (/model lists them.)"
    choice.set(chat_id, model, user_id)
    return choice.chosen_text(model)


def reminders_reply(services: Services, user_id: int, args: list[str]) -> str:
    """/reminders and its typed sub-commands, which stand for the buttons in Telegram (in a worker thread:
    the caller wakes the schedule runner)."""
    service = services.schedules.service
    if not args:
        text, items = listing_text(service, user_id, None)
        return f"{text}\n{REMINDERS_HINT}" if items else text
    action = args[0].lower()
    item_id = parse_int(args[1], 1, MAX_ID) if len(args) >= 2 else None
    minutes = parse_int(args[2], 1, MAX_SNOOZE_MINUTES) if len(args) == 3 else 10
    if item_id is None or minutes is None or len(args) > (3 if action == "snooze" else 2):
        return REMINDERS_USAGE
    try:
        if action == "cancel":
            return cancel_note(service, user_id, item_id, None)
        if action == "resume":
            note = resume_note(service, user_id, item_id)
        elif action == "snooze":
            note = snooze_note(service, user_id, item_id, minutes)
        elif action == "done":
            service.done(user_id, item_id)
            return "Done."
        else:
            return REMINDERS_USAGE
    except ScheduleInputError as exc:  # not the user's, or already handled: nothing changes
        return f"{exc}."
    return note


class TerminalCommands:
    """Answers the terminal's commands that do not drive the chat (those are bot.terminal.chat's)."""

    def __init__(self, services: Services, user_id: int, models: ModelChoice) -> None:
        self.services = services
        self.user_id = user_id
        self.chat_id = user_id  # the user's private chat, as in Telegram
        self.models = models

    async def reply(self, name: str, args: list[str]) -> tuple[list[str], bool]:
        """The messages answering `/name args`, and whether they are Markdown; an unknown command gets
        the list of commands, as in Telegram."""
        s, user = self.services, self.user_id
        if name == "memory":
            return [await memory_reply(s, user, self.chat_id, True, args)], False
        if name == "timezone":
            reply = await asyncio.to_thread(timezone_reply, s, user, None, None, args)
            s.schedules.wake()  # a moved, resumed or snoozed firing may be due sooner than the next look
            return [reply], False
        if name == "reminders":
            reply = await asyncio.to_thread(reminders_reply, s, user, args)
            s.schedules.wake()
            return [reply], False
        if name == "usage":
            return [usage_reply(s.usage_service, user, args)], False
        if name == "budget":
            return [budget_reply(s.usage_service, user, args)], False
        if name == "codestats":
            return [codestats_reply(s.code.executions, user, args)], False
        if name == "codefailures":
            return codefailures_replies(s.code.executions, user, args)
        if name == "model":
            return [model_reply(self.models, self.chat_id, user, args)], False
        return [help_text(Audience.TERMINAL)], False
