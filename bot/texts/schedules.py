"""What /reminders answers and what its buttons (or the terminal's typed commands) tell the user: a
user's reminders and scheduled tasks, cancelled, resumed, snoozed."""

from __future__ import annotations

from typing import Any

from core_tools.schedule.costs import usd
from core_tools.schedule.service import ScheduleService

LIST_LIMIT = 30
EMPTY = (
    "You have no reminders or scheduled tasks. Ask me, for example: \u201cremind me tomorrow at 9 to call "
    "the dentist\u201d or \u201cevery weekday at 8 send me the weather\u201d."
)


PAUSE_REASONS = {
    "blocked": "you had blocked me",
    "failures": "it failed 3 times in a row",
    "cost": "a run cost far more than usual",
    "user": "you paused it",
}


def spend_line(item: dict[str, Any]) -> str | None:
    """A task's 'spent this month: $0.0123 of $1.00' (None for a reminder or when it is not known)."""
    spent = item.get("spent_this_month_usd")
    if spent is None:
        return None
    limit = item.get("max_cost_per_month")
    return f"spent this month: {usd(spent)}" + (f" of {usd(limit)}" if limit is not None else "")


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def listing_text(service: ScheduleService, user_id: int, chat_scope: int | None) -> tuple[str, list[Any]]:
    """The /reminders text and the schedules it shows (their ids for the cancel and resume buttons)."""
    items = service.list_for(user_id, chat_scope)
    if not items:
        return EMPTY, []
    lines = ["Your reminders and scheduled tasks:"]
    for item in items[:LIST_LIMIT]:
        label = "task" if item["kind"] == "task" else "reminder"
        when = item.get("snoozed_until") or (item["next"][0] if item["next"] else "no further time")
        line = f"#{item['id']} {label}: {_short(item['text'])}\n   next: {when} ({item['timezone']})"
        if item.get("repeat"):
            line += f"\n   {item['description']}"
        spend = spend_line(item)
        if spend:
            line += f"\n   {spend}"
        if item["status"] == "paused":
            why = PAUSE_REASONS.get(item.get("paused") or "", PAUSE_REASONS["failures"])
            line += f"\n   paused ({why})"
        lines.append(line)
    if len(items) > LIST_LIMIT:
        lines.append(f"... and {len(items) - LIST_LIMIT} more.")
    return "\n".join(lines), items[:LIST_LIMIT]


def snooze_note(service: ScheduleService, user_id: int, firing_id: int, minutes: int) -> str:
    """Snooze a fired reminder; what to tell the user (ScheduleInputError when it is not theirs)."""
    when = service.snooze(user_id, firing_id, minutes)
    return f"Snoozed until {service.local(user_id, when)}."


def cancel_note(service: ScheduleService, user_id: int, schedule_id: int, chat_scope: int | None) -> str:
    """Cancel a schedule; what to tell the user (ScheduleInputError when it is not theirs)."""
    gone = service.cancel(user_id, schedule_id, chat_scope)
    return f"Cancelled #{gone['id']}."


def resume_note(service: ScheduleService, user_id: int, schedule_id: int) -> str:
    """Resume a paused schedule; what to tell the user (ScheduleInputError when it is not theirs)."""
    service.resume(user_id, schedule_id)
    return f"Resumed #{schedule_id}."
