"""What check-ins say (core_tools/checkin/): the message and its buttons, the message after a press, and
/checkin's replies. The runtime sends through `compose` (bot/runtime/checkin_jobs.py); the adapter's
buttons re-render with `rendered`."""

from __future__ import annotations

from typing import Any

from bot.runtime.checkin_jobs import Message
from bot.runtime.outbox import Buttons
from core_tools.schedule.costs import usd

TITLE = "🔔 Check-in"
KIND_WORDS = {"goal": "Goal", "reminder": "Reminder", "task": "Task", "cap": "Cap", "memory": "Memory"}
STATE_WORDS = {"still": "✓ still on", "done": "✅ done", "dropped": "🗑 dropped", "snoozed": "💤 snoozed"}
QUIET_NOTE = "(I write only when something is due; any button tells me check-ins are useful.)"


def _line(n: int | None, item: dict[str, Any]) -> str:
    head = f"{n}. " if n is not None else "• "
    kind = KIND_WORDS.get(item.get("kind", ""), "Item")
    line = f"{head}{kind}: {item['text']} ({item['why']})"
    state = item.get("state")
    return f"{line} — {STATE_WORDS[state]}" if state in STATE_WORDS else line


def _buttons(items: list[dict[str, Any]]) -> list[list[tuple[str, str]]]:
    rows: list[list[tuple[str, str]]] = []
    numbered = sum(1 for i in items if i.get("kind") in ("goal", "reminder", "task")) > 1
    for n, item in enumerate(items, 1):
        tag = f"{n}: " if numbered else ""
        kind, ref, state = item.get("kind"), item.get("ref", ""), item.get("state")
        if kind == "goal":
            if state == "dropped":
                rows.append([(f"{tag}Undo drop", f"ci:undo:{ref}")])
            elif state is None:
                rows.append(
                    [
                        (f"{tag}Still on", f"ci:still:{ref}"),
                        (f"{tag}Done", f"ci:done:{ref}"),
                        (f"{tag}Drop", f"ci:drop:{ref}"),
                    ]
                )
        elif kind == "reminder" and item.get("snooze") and state is None:
            rows.append([(f"{tag}Snooze 1 h", f"ci:snz:{ref}")])
        elif kind == "task" and item.get("paused") and state is None:
            rows.append([(f"{tag}Resume #{ref}", f"sch:resume:{ref}")])
    return rows


def rendered(
    items: list[dict[str, Any]],
    note: str | None = None,
    digest: str | None = None,
    digest_note: str | None = None,
) -> tuple[str, Buttons]:
    """A check-in's text and buttons from its items (their states after presses shown)."""
    numbered = len(items) > 1
    lines = [_line(n if numbered else None, it) for n, it in enumerate(items, 1)]
    parts = [TITLE]
    if digest:
        parts.append(digest)
        parts.append("\n".join(lines))
    else:
        parts.append("\n".join(lines))
    if digest_note:
        parts.append(f"(No digest this time: {digest_note})")
    if note:
        parts.append(
            f"(The last two check-ins got no answer, so I check in {note} from now on. "
            "Press any button to bring back your usual time.)"
        )
    else:
        parts.append(QUIET_NOTE)
    return "\n\n".join(parts), _buttons(items)


def compose(message: Message) -> tuple[str, Buttons]:
    """The runtime's `compose`: a due check-in's text and buttons."""
    return rendered(message.items, message.note, message.digest, message.digest_note)


def state_text(state: dict[str, Any]) -> str:
    """What /checkin alone answers."""
    if not state.get("enabled"):
        return (
            "Check-ins are off. Turn them on with /checkin daily 09:00 or /checkin weekly mon 18:00; "
            "I then look at your goals, reminders, tasks and caps at that time and write only when something "
            "is due (that look makes no LLM request and costs nothing)."
        )
    lines = [
        f"Check-in: {state['description']}" + (", as an LLM digest" if state.get("digest") else "") + "."
    ]
    if state.get("backoff"):
        lines.append(f"Backed off to {state['backoff']} after ignored check-ins; any button resets it.")
    if state.get("next"):
        lines.append(f"Next look: {state['next']}.")
    if state.get("digest"):
        lines.append(digest_price_line(state.get("digest_price_usd")))
    if state.get("last_sent"):
        items = state.get("last_items") or []
        lines.append(f"Last check-in sent {state['last_sent']} with {len(items)} item(s).")
    elif state.get("last_run"):
        lines.append(f"Last look {state['last_run']}: nothing was due, nothing sent.")
    lines.append("/checkin off turns it off.")
    return "\n".join(lines)


def digest_price_line(price: float | None) -> str:
    """The forecast price of one digest, shown at set-up."""
    if price is None:
        return "Each digest is one short LLM request (its price is unknown: the model has no price set)."
    return (
        f"Each digest is one short LLM request, forecast at about {usd(price)}, counted against your caps "
        "(and only made when something is due)."
    )


def set_text(state: dict[str, Any]) -> str:
    """The answer to /checkin daily|weekly ...: when, what it costs."""
    lines = [f"Check-in set: {state['description']}."]
    if state.get("next"):
        lines.append(f"First look: {state['next']}.")
    if state.get("digest"):
        lines.append(digest_price_line(state.get("digest_price_usd")))
    else:
        lines.append("It costs nothing: no LLM request is made, and nothing is sent when nothing is due.")
    return "\n".join(lines)
