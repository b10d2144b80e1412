"""Each user's data to take (`/export`, `python -m bot export-user ID`) or erase (`/forget_me`,
`python -m bot forget-user ID`)."""

from __future__ import annotations

import json
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine

from core_tools.backup.manifest import BackupError
from db.scrub import erasing, scrub
from db.userdata import Erased, erase_user, user_rows

# What each table is called in the export and the erase's summary, for a person.
TABLE_WORDS = {
    "messages": "messages",
    "sessions": "conversation sessions",
    "memories": "memories",
    "memory_history": "memory changes",
    "memory_extractions": "extraction marks",
    "schedules": "reminders and scheduled tasks",
    "schedule_firings": "reminder deliveries",
    "llm_calls": "usage records",
    "tool_calls": "tool calls",
    "code_executions": "code runs",
    "code_jobs": "code jobs",
    "media_files": "files",
    "tool_results": "stored tool results",
    "inbox": "waiting messages",
    "budgets": "usage caps",
    "budget_notices": "cap notices",
    "turn_events": "turn events",
    "users": "user record",
    "chat_settings": "chat settings",
}
README = """Everything this assistant stores about you, as of {time} (UTC).

conversations.md    your conversations, readable
conversations.json  the same with every field (sessions and their messages)
memories.json       what the assistant remembers about you, and every change of it (history)
schedules.json      your reminders and scheduled tasks, and their deliveries
usage.json          your usage: model calls with tokens and cost, tool calls, caps
code_runs.json      the code the assistant ran for you, with its output
files/              the files you sent (files.json describes them)
all_tables.json     every row about you, table by table (all of the above, and anything else)
"""


def _media_path(media_dir: Path, sha: str) -> Path:
    return media_dir / sha[:2] / sha


def _markdown(rows: dict[str, list[dict[str, Any]]]) -> str:
    sessions = {s["id"]: s for s in rows.get("sessions", [])}
    lines = ["# Your conversations", ""]
    current = None
    for msg in rows.get("messages", []):
        if msg.get("role") == "tool" or not msg.get("content"):
            continue
        if msg["session_id"] != current:
            current = msg["session_id"]
            session = sessions.get(current, {})
            title = f"{session.get('name', 'session')} (chat {msg['chat_id']})"
            lines += ["", f"## {title}, started {session.get('started_at', '?')}", ""]
        who = "You" if msg["role"] == "user" else "Assistant"
        lines += [f"**{who}** ({msg.get('created_at', '')}):", "", str(msg["content"]), ""]
    return "\n".join(lines) + "\n"


def dump(body: Any) -> str:
    """Indented JSON, for people."""
    return json.dumps(body, indent=2, ensure_ascii=False, default=str)


def _pick(rows: dict[str, list[dict[str, Any]]], *names: str) -> dict[str, list[dict[str, Any]]]:
    return {name: rows.get(name, []) for name in names}


@dataclass
class Export:
    """An export archive written to disk."""

    path: Path
    tables: dict[str, int]
    files: int


def export_user(engine: Engine, media_dir: Path, user_id: int, target: Path) -> Export:
    """Write one ZIP of everything about the user to `target`."""
    with engine.connect() as conn:
        rows = user_rows(conn, user_id)
    if not rows:
        raise BackupError(f"there is nothing stored about user {user_id}")
    media = rows.get("media_files", [])
    files = 0
    target.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(target, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as z:
        z.writestr("README.txt", README.format(time=datetime.now(UTC).isoformat(timespec="seconds")))
        z.writestr("conversations.md", _markdown(rows))
        z.writestr("conversations.json", dump(_pick(rows, "sessions", "messages", "inbox")))
        z.writestr("memories.json", dump(_pick(rows, "memories", "memory_history")))
        z.writestr("schedules.json", dump(_pick(rows, "schedules", "schedule_firings")))
        z.writestr(
            "usage.json",
            dump(_pick(rows, "llm_calls", "tool_calls", "budgets", "budget_notices", "turn_events")),
        )
        z.writestr("code_runs.json", dump(_pick(rows, "code_executions", "code_jobs")))
        z.writestr("files/files.json", dump(media))
        for row in media:
            sha = row.get("sha256")
            path = _media_path(media_dir, sha) if sha else None
            if path is None or not path.is_file():
                continue
            z.write(path, f"files/{row['id']}-{Path(str(row['file_name'])).name}")
            files += 1
        z.writestr("all_tables.json", dump(rows))
    return Export(target, {k: len(v) for k, v in rows.items()}, files)


def split_file(path: Path, part_bytes: int) -> list[Path]:
    """The file itself when it fits in `part_bytes`, else its parts `NAME.001`, `NAME.002`, ... (joined with
    `cat NAME.0* > NAME`); the whole file is then deleted."""
    size = path.stat().st_size
    if size <= part_bytes:
        return [path]
    parts = []
    with path.open("rb") as handle:
        for number in range(1, size // part_bytes + 2):
            chunk = handle.read(part_bytes)
            if not chunk:
                break
            part = path.with_name(f"{path.name}.{number:03d}")
            part.write_bytes(chunk)
            parts.append(part)
    path.unlink()
    return parts


def forget_user(engine: Engine, media_dir: Path, user_id: int) -> Erased:
    """Delete every row of the user (one transaction, its freed bytes zeroed), leave no copy of them in the
    database's files (`erased.scrubbed` says whether that could be done now: else `scrub` again later), then
    delete the files only they sent."""
    with erasing(engine) as conn, conn.begin():
        erased = erase_user(conn, user_id)
    erased.scrubbed = scrub(engine, [*erased.rows, "sessions", "approvals"])
    for sha in erased.media:
        for path in (_media_path(media_dir, sha), _media_path(media_dir, sha).with_name(f"{sha}.txt")):
            path.unlink(missing_ok=True)
    return erased


def scrub_files(engine: Engine) -> bool:
    """Try again to leave no copy of erased rows in the database's files (after `forget_user` said it could
    not yet); whether that is done."""
    return scrub(engine)


def summary(erased: Erased) -> Iterator[str]:
    """What an erase deleted, one line per kind, for a person."""
    for table, count in sorted(erased.rows.items(), key=lambda item: -item[1]):
        yield f"{count} {TABLE_WORDS.get(table, table.replace('_', ' '))}"
    if erased.media:
        yield f"{len(erased.media)} stored file(s) from disk"
    if erased.sessions_handed_on:
        yield f"({erased.sessions_handed_on} group conversation(s) kept for the group, without your messages)"
