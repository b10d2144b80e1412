"""What /memory and /timezone answer: a user's memories and time zone (the maintenance jobs:
bot/runtime/jobs.py)."""

from __future__ import annotations

from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bot.runtime.memory_check import self_check
from bot.runtime.services import Services
from core_tools.memory.selfcheck import findable_line
from db.models import utcnow

MEMORY_USAGE = (
    "Usage: /memory (list), /memory search TEXT, /memory recent, /memory forget ID, /memory history ID, "
    "/memory undo [ID]"
)
ORIGIN_NOTES = {
    "tool": "from web/tool content",
    "extraction": "remembered from our chat",
    "summary": "summary",
}
UNTRUSTED_NOTE = "⚠ untrusted: saved while reading web/tool content"
TIMEZONE_USAGE = "Usage: /timezone Area/City, for example /timezone Europe/Berlin"
LAYER_TITLES = {"long": "Long-term", "mid": "Mid-term", "short": "Short-term", "session": "This session"}


def _line(m: dict[str, Any]) -> str:
    text = m["content"] if len(m["content"]) <= 200 else m["content"][:197] + "..."
    score = f" ({m['relevance']:.2f})" if m.get("relevance") is not None else ""
    tags = [m["category"]]
    if m.get("said_by"):
        tags.append(f"said by {m['said_by']}")
    if m.get("untrusted"):
        tags.append(UNTRUSTED_NOTE)
    elif m.get("origin") in ORIGIN_NOTES:
        tags.append(ORIGIN_NOTES[m["origin"]])
    if m.get("event_at"):
        tags.append(f"happened {m['event_at'][:10]}")
    return f"• {text} [{', '.join(tags)}, id {m['id']}]{score}"


def _change_line(c: dict[str, Any]) -> str:
    when = str(c["at"])[:16].replace("T", " ")
    head = f"#{c['change']} {when} {c['action']} by {c['actor']}" + (" (undone)" if c["undone"] else "")
    parts = [head]
    if c["old_text"] and c["action"] != "add":
        parts.append(f"  before: {c['old_text'][:200]}")
    if c["new_text"] and c["action"] != "forget":
        parts.append(f"  after: {c['new_text'][:200]}")
    if c["related_id"] and c["related_id"] != c["memory_id"]:
        parts.append(f"  replaced by {c['related_id']}" if c["action"] == "supersede" else "")
    if c["reason"]:
        parts.append(f"  why: {c['reason'][:200]}")
    return "\n".join(p for p in parts if p)


async def memory_reply(services: Services, user_id: int, chat_id: int, private: bool, args: list[str]) -> str:
    """What /memory (and its sub-commands) answers; memories are shown in the user's private chat only."""
    store = services.memory
    if not private:  # memories are private: never shown to a group
        return "Your memories are private: use /memory in a private chat with me."
    if not args:
        session = services.conversations.current_session(user_id, chat_id)
        sections = []
        for layer, title in LAYER_TITLES.items():
            items = await store.list_memories(
                user_id, layer=layer, limit=15, session_id=session.id if layer == "session" else None
            )
            if items:
                sections.append(f"{title}:\n" + "\n".join(_line(m) for m in items))
        if not sections:
            return "I have no memories about you yet."
        checked = findable_line(await self_check(services).last(user_id))  # the nightly self-check's
        return "\n\n".join(sections + ([checked] if checked else []))
    action, rest = args[0].lower(), " ".join(args[1:]).strip()
    if action == "search" and rest:
        found = await store.recall(user_id, rest, limit=10)
        return "\n".join(_line(m) for m in found) if found else "Nothing matches that."
    if action == "forget" and rest and len(args) == 2:
        gone = await store.forget(user_id, rest)
        return (
            "Forgotten. (/memory undo brings it back.)"
            if gone
            else f"No memory with id {rest} (see /memory for ids)."
        )
    if action == "recent" and not rest:
        recent = await store.recent(user_id, days=7)
        if not recent:
            return "Nothing new remembered in the last 7 days."
        return "Remembered in the last 7 days:\n" + "\n".join(f"{_line(m)} (by {m['by']})" for m in recent)
    if action == "history" and rest and len(args) == 2:
        changes = await store.history(user_id, rest)
        if not changes:
            return f"No history for id {rest} (see /memory for ids)."
        return f"Changes of {rest}, newest first:\n" + "\n".join(_change_line(c) for c in changes)
    if action == "undo" and len(args) <= 2:
        done = await store.undo(user_id, rest or None)
        if done is None:
            return "Nothing to undo." if not rest else f"Nothing to undo for id {rest}."
        text = (done["content"] or "")[:200]
        return f"Undone: {done['action']} of {done['memory_id']} ({text}): {done['detail']}."
    return MEMORY_USAGE


def timezone_reply(
    services: Services, user_id: int, first_name: str | None, username: str | None, args: list[str]
) -> str:
    """What /timezone answers; with a valid zone it is set, and the user's schedules move with it (the
    caller wakes the schedule runner: this runs in a worker thread)."""
    conv = services.conversations
    if not args:
        current = conv.user_timezone(user_id) or services.settings.default_timezone
        return f"Your time zone is {current}. {TIMEZONE_USAGE}"
    name = args[0]
    try:
        zone = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: a name too long or a folder
        return f"I don't know the time zone {name[:64]!r}. {TIMEZONE_USAGE}"
    if len(args) != 1:
        return TIMEZONE_USAGE
    conv.ensure_user(user_id, first_name, username)
    conv.set_user_timezone(user_id, name)
    services.schedules.service.reconcile_zones()  # future firings of local-time schedules move
    return f"Time zone set to {name} (it is {utcnow().astimezone(zone):%H:%M} there now)."
