"""What the app's JSON API answers: the services' data shaped for the page (plain dicts, ISO times).

Every value comes from the same service methods the chat commands use; the wording shared with them (the
origin notes of /memory, the layer titles, the pause reasons of /reminders) is imported from bot/texts, not
repeated.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from bot.texts.memory import LAYER_TITLES, ORIGIN_NOTES, UNTRUSTED_NOTE
from bot.texts.schedules import PAUSE_REASONS
from core_tools.guest import PURPOSES as GUEST_PURPOSES
from core_tools.memory.views import iso
from core_tools.usage.caps import CapStatus
from core_tools.usage.daily import DailyUsage
from core_tools.usage.service import AllUsage, UsageService
from db.executions import RunDetail, RunRow
from db.media import MediaRow

OUTPUT_CHARS = 100_000  # of a run's code, stdout and stderr each: a page shows that much, the chat less
CODE_LINE_CHARS = 80  # of the code line a list of runs shows for each run


def _utc(value: datetime | None) -> str | None:
    """A stored time (naive UTC or aware) as ISO 8601 with its offset, to the second."""
    if value is None:
        return None
    return iso(value if value.tzinfo is not None else value.replace(tzinfo=UTC))


def memory(m: dict[str, Any]) -> dict[str, Any]:
    """A memory as /memory shows it: the store's view plus the notes /memory adds to it."""
    out = dict(m)
    out["layer_title"] = LAYER_TITLES.get(m["layer"], m["layer"])
    out["untrusted"] = bool(m.get("untrusted"))
    # As in /memory: untrusted says more than the origin, so it replaces the origin's note.
    out["note"] = UNTRUSTED_NOTE if out["untrusted"] else ORIGIN_NOTES.get(m.get("origin") or "")
    return out


def change(c: dict[str, Any]) -> dict[str, Any]:
    """A history row as /memory history shows it."""
    return dict(c)


def schedule(view: dict[str, Any]) -> dict[str, Any]:
    """A schedule as /reminders shows it, with what can be done to it and its spend this month.

    `state`: what the page's badge says: the status, except "snoozed" while a snooze of a reminder that is
    not paused is pending (a one-time reminder that fired is "done" until its snooze comes).
    `spend_month_usd`: a task's spend this calendar month, as /reminders shows it; None for a reminder or
    when costs are not known (the page shows "–")."""
    out = dict(view)
    status = view["status"]
    out["state"] = "snoozed" if "snoozed_until" in view and status != "paused" else status
    if status == "paused":
        out["paused_why"] = PAUSE_REASONS.get(view.get("paused") or "", PAUSE_REASONS["failures"])
    out["actions"] = [
        a
        for a, ok in (
            ("pause", status == "active"),
            ("resume", status == "paused"),
            ("cancel", status in ("active", "paused") or "snoozed_until" in view),
        )
        if ok
    ]
    out["spend_month_usd"] = view.get("spent_this_month_usd")
    return out


def cap(c: CapStatus) -> dict[str, Any]:
    """One cap: its limit, what is spent and held against it, what is left, and when it resets."""
    return {
        "period": c.period,
        "kind": c.kind,
        "limit": c.limit,
        "spent": c.spent,
        "reserved": c.reserved,
        "left": max(0.0, c.limit - c.spent - c.reserved),
        "source": c.source,
        "resets_at": _utc(c.window.end),
    }


def usage(daily: DailyUsage, caps: list[CapStatus]) -> dict[str, Any]:
    """Tokens and cost per day by purpose and model (the page sums them its way), and the caps."""
    return {
        "timezone": daily.timezone,
        "days": [d.isoformat() for d in daily.days],
        "lines": [
            {
                "day": line.day,
                "purpose": line.purpose,
                "model": line.model,
                "calls": line.calls,
                "tokens": line.tokens,
                "cost": line.cost,
            }
            for line in daily.lines
        ],
        "caps": [cap(c) for c in caps],
        "other_chats": other_chats(daily),
    }


# What the page says of a guest or inline answer's requests (core_tools/guest.py): asked in another chat.
OTHER_CHATS = {
    "guest": "answers posted as a guest in other chats",
    "inline": "answers of inline queries in other chats",
}


def other_chats(daily: DailyUsage) -> list[dict[str, Any]]:
    """The guest and inline turns' requests over the days (purposes "guest", "inline"), marked as such."""
    out: dict[str, dict[str, Any]] = {}
    for line in daily.lines:
        if line.purpose not in GUEST_PURPOSES:
            continue
        row = out.setdefault(
            line.purpose,
            {
                "purpose": line.purpose,
                "label": OTHER_CHATS[line.purpose],
                "calls": 0,
                "tokens": 0,
                "cost": 0.0,
            },
        )
        row["calls"] += line.calls
        row["tokens"] += line.tokens
        row["cost"] = None if row["cost"] is None or line.cost is None else row["cost"] + line.cost
    return [out[p] for p in GUEST_PURPOSES if p in out]


def everyone(service: UsageService, month: AllUsage, allowed: list[int]) -> dict[str, Any]:
    """The owner's view: every user's usage this month (the owner's calendar month) and their caps."""
    users = {u.user_id: u for u in month.users}
    rows = []
    for uid in dict.fromkeys([*allowed, *users]):
        line = users.get(uid)
        caps = service.effective_caps(uid)
        rows.append(
            {
                "user_id": uid,
                "who": line.who if line is not None else service.describe_user(uid),
                "tokens": line.spend.tokens if line is not None else 0,
                "cost": line.spend.cost if line is not None else 0.0,
                "unpriced_models": list(line.spend.unpriced_models) if line is not None else [],
                "turns": line.turns if line is not None else 0,
                "reached": cap(line.reached) if line is not None and line.reached is not None else None,
                "caps": [
                    {"period": p, "kind": k, "limit": limit, "source": source}
                    for (p, k), (limit, source) in sorted(caps.items())
                    if limit is not None
                ],
            }
        )
    return {
        "period_start": _utc(month.window.start),
        "period_end": _utc(month.window.end),
        "users": rows,
        "total": {"tokens": month.total.tokens, "cost": month.total.cost, "turns": month.total_turns},
    }


def code_line(line: str) -> str:
    """A run's first line of code, cut to CODE_LINE_CHARS ("…" where cut); the page shows it as text."""
    return line if len(line) <= CODE_LINE_CHARS else line[: CODE_LINE_CHARS - 1] + "…"


def run(r: RunRow) -> dict[str, Any]:
    """One code run in a list (with its first line of code)."""
    return {
        "id": r.id,
        "language": r.language,
        "code_line": code_line(r.first_line),
        "status": "ok" if r.success else "failed",
        "exit_code": r.exit_code,
        "duration_ms": r.duration_ms,
        "error_category": r.error_category,
        "created_at": _utc(r.created_at),
        "truncated": r.truncated,
        "files": r.files,
    }


def _clip(text: str) -> str:
    return text if len(text) <= OUTPUT_CHARS else text[:OUTPUT_CHARS] + "\n…"


def run_detail(d: RunDetail) -> dict[str, Any]:
    """One code run whole: code, output, and the names and sizes of the files it wrote."""
    return {
        **run(d.run),
        "code": _clip(d.code),
        "stdout": _clip(d.stdout),
        "stderr": _clip(d.stderr),
        "stdout_bytes": d.stdout_bytes,
        "stderr_bytes": d.stderr_bytes,
        "isolation": d.isolation,
        "files_out": [
            {
                "name": str(f.get("name", ""))[:255],
                "size": f.get("size") if isinstance(f.get("size"), int) else None,
            }
            for f in d.files_out
        ],
    }


def media_file(m: MediaRow) -> dict[str, Any]:
    """A file the user sent (its name exactly as sent: the page shows it as text)."""
    return {
        "id": m.id,
        "kind": m.kind,
        "name": m.file_name,
        "mime_type": m.mime_type,
        "size": m.size,
        "status": m.status,
        "detail": m.detail,
        "duration_s": m.duration_s,
        "text_chars": m.text_chars,
        "created_at": _utc(m.created_at),
    }
