"""Check-ins: the opt-in, what happens when one falls due, and the buttons under one.

A check-in is a `schedules` row of kind "checkin" (db/checkins.KIND), so the reminders' machinery fires it
exactly once across restarts and replicas (the firing row is inserted and the schedule advanced in one
transaction, and only the process holding the reminders' lease delivers). Its time follows the user's zone
(the row's `timezone` is NULL: a /timezone moves it like a local reminder). What the check-in says is
decided here, without an LLM: `plan` reads the users' own rows in batches (db/checkins.py) and applies the
rules (core_tools/checkin/rules.py); nothing qualifying means nothing is sent. The memory actions of the
buttons go through `MemoryActions` (the memory store, given by the composition root): this package imports
no other capability.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from core_tools.checkin import rules
from core_tools.checkin.rules import CapFigure, CheckinInputError, Limits, Request
from core_tools.errors import ToolError
from db import memories as mq
from db import memory_history as mh
from db.checkins import KIND, CheckinRow, Checkins
from db.schedules import FiringRow, Schedules

log = logging.getLogger(__name__)

SNOOZE_MINUTES = 60  # a reminder's Snooze under a check-in


class MemoryActions(Protocol):
    """What the buttons do to memories (core_tools/memory/store.py MemoryStore)."""

    async def edit(
        self, user_id: int, memory_id: str, content: str, actor: str = "user", reason: str | None = None
    ) -> dict[str, Any] | None:
        """Rewrite a memory, its old text kept in the history."""
        ...

    async def forget(self, user_id: int, memory_id: str, actor: str = "user") -> dict[str, Any] | None:
        """Forget a memory, undoably."""
        ...

    async def undo(self, user_id: int, memory_id: str | None = None) -> dict[str, Any] | None:
        """Undo the last change of a memory."""
        ...


@dataclass(frozen=True)
class Plan:
    """What to do with one due check-in firing: `items` to send (none: stay silent), `note` the back-off
    sentence to add, `row` the user's check-in."""

    firing: FiringRow
    row: CheckinRow | None
    items: list[dict[str, Any]]
    note: str | None = None
    skip_reason: str | None = None


class CheckinService:
    """The check-ins of every user."""

    def __init__(
        self,
        store: Checkins,
        schedules: Schedules,
        zone_of_user: Callable[[int], str],
        memory: MemoryActions,
        *,
        caps: Callable[[Sequence[int]], dict[int, list[CapFigure]]] | None = None,
        limits: Limits | None = None,
        mid_ttl: timedelta = timedelta(days=90),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        digest_price: Callable[[], float | None] | None = None,
        snooze: Callable[[int, int, int], datetime] | None = None,
    ) -> None:
        self.store = store
        self.schedules = schedules
        self.zone_of_user = zone_of_user
        self.memory = memory
        self.caps = caps
        self.limits = limits or Limits()
        self.mid_ttl = mid_ttl
        self.clock = clock
        self.digest_price = digest_price  # USD one digest is forecast to cost (None: unknown)
        # (user, schedule id, minutes) -> when a reminder's next occurrence now comes (the schedules').
        self.snooze = snooze

    # ------------------------------------------------------------------ opt-in

    def _zone(self, user_id: int) -> tuple[str, ZoneInfo]:
        name = self.zone_of_user(user_id)
        try:
            return name, ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            return "UTC", ZoneInfo("UTC")

    def set(self, user_id: int, req: Request) -> CheckinRow:
        """Turn on (or change) the user's check-in, delivered to their private chat; back-off starts over."""
        assert req.action == "set" and req.cadence is not None and req.at_local is not None
        now = self.clock()
        zone_name, zone = self._zone(user_id)
        first = rules.first_time(req.cadence, req.weekday, req.at_local, zone, now)
        start = first.astimezone(zone).replace(tzinfo=None)
        old = self.store.get(user_id)
        if old is not None and old.schedule_id is not None:
            self._end_schedule(old.schedule_id)
        sched = self.schedules.add(
            user_id=user_id,
            chat_id=user_id,  # the user's private chat: a group never gets a check-in
            chat_type="private",
            kind=KIND,
            text="check-in",
            start_local=start.isoformat(),
            timezone=None,  # follows the user's zone
            zone_used=zone_name,
            repeat=rules.rrule(req.cadence, req.weekday),
            repeat_kind="rrule",
            until_at=None,
            count=None,
            fired_count=0,
            status="active",
            failures=0,
            next_fire_at=first,
        )
        row = self.store.put(
            user_id,
            schedule_id=sched.id,
            enabled=True,
            cadence=req.cadence,
            weekday=req.weekday,
            at_local=req.at_local,
            digest=req.digest,
            level=0,
            ignored=0,
            awaiting=False,
        )
        log.info(
            "check-in of user %s set: %s",
            user_id,
            rules.describe(req.cadence, req.weekday, req.at_local, zone_name),
        )
        return row

    def off(self, user_id: int) -> bool:
        """Turn the user's check-in off; False when it was not on."""
        row = self.store.get(user_id)
        if row is None or not row.enabled:
            return False
        if row.schedule_id is not None:
            self._end_schedule(row.schedule_id)
        self.store.put(user_id, enabled=False, schedule_id=None)
        return True

    def _end_schedule(self, schedule_id: int) -> None:
        self.schedules.cancel_pending([schedule_id])
        self.schedules.change(schedule_id, status="cancelled", next_fire_at=None)

    def state(self, user_id: int) -> dict[str, Any]:
        """The check-in as /checkin and the app show it: on or off, when, the next time, the back-off,
        and what the last one contained."""
        row = self.store.get(user_id)
        zone_name, zone = self._zone(user_id)
        out: dict[str, Any] = {"enabled": bool(row and row.enabled), "timezone": zone_name}
        if row is None:
            return out
        if row.enabled:
            out["cadence"] = row.cadence
            out["weekday"] = rules.WEEKDAYS[row.weekday] if row.weekday is not None else None
            out["at"] = row.at_local
            out["digest"] = row.digest
            out["description"] = rules.describe(row.cadence, row.weekday, row.at_local, zone_name)
            out["backoff"] = rules.backoff_words(row.cadence, row.level) if row.level else None
            sched = self.schedules.get(row.schedule_id) if row.schedule_id is not None else None
            if sched is not None and sched.next_fire_at is not None:
                out["next"] = f"{sched.next_fire_at.astimezone(zone):%a %d %b %Y %H:%M}"
            if row.digest and self.digest_price is not None:
                out["digest_price_usd"] = self.digest_price()
        if row.last_sent_at is not None:
            out["last_sent"] = f"{row.last_sent_at.astimezone(zone):%a %d %b %Y %H:%M}"
            out["last_items"] = row.last_items or []
            out["last_text"] = row.last_text
        if row.last_run_at is not None:
            out["last_run"] = f"{row.last_run_at.astimezone(zone):%a %d %b %Y %H:%M}"
        return out

    # ------------------------------------------------------------------ when one falls due

    def plan(self, firings: Sequence[FiringRow]) -> list[Plan]:
        """For due check-in firings: count ignored ones, apply the back-off, run the preflight (a few
        batched queries for all of them, no LLM; one write for all). Synchronous: run it in a worker
        thread."""
        now = self.clock()
        rows = self.store.many([f.user_id for f in firings])
        plans: list[Plan] = []
        wanted: list[tuple[FiringRow, CheckinRow, str | None]] = []
        writes: dict[int, dict[str, Any]] = {}
        for f in firings:
            row = rows.get(f.user_id)
            if row is None or not row.enabled or row.schedule_id != f.schedule_id:
                plans.append(Plan(f, row, [], skip_reason="turned off"))
                continue
            if f.chat_type != "private" or f.chat_id != f.user_id:
                plans.append(Plan(f, row, [], skip_reason="not a private chat"))
                continue
            writes[f.user_id] = {"last_run_at": now}
            if not rules.due_by_backoff(row.cadence, row.level, row.last_sent_at, now):
                plans.append(Plan(f, row, [], skip_reason="backed off"))
                continue
            note = None
            if row.awaiting:  # the last one sent got no press before this one
                level, ignored, backed = rules.after_ignore(row.level, row.ignored)
                if backed:  # this one still goes out (when something is due), saying so
                    note = rules.backoff_words(row.cadence, level)
                row = replace(row, level=level, ignored=ignored, awaiting=False)
                writes[f.user_id].update(level=level, ignored=ignored, awaiting=False)
            wanted.append((f, row, note))
        if wanted:
            inputs = self.store.inputs(
                [f.user_id for f, _, _ in wanted], now, near=self.limits.near, quiet=self.limits.quiet
            )
            caps = self.caps([f.user_id for f, _, _ in wanted]) if self.caps is not None else {}
            for f, row, note in wanted:
                _, zone = self._zone(f.user_id)
                mine = caps.get(f.user_id, [])
                items = rules.preflight(inputs[f.user_id], mine, now, zone, self.limits)
                plans.append(Plan(f, row, items, note if items else None, None if items else "nothing due"))
        self.store.put_many(writes)
        return plans

    def sent(
        self,
        user_id: int,
        items: list[dict[str, Any]],
        text: str,
        message_id: int | None,
        cost: float | None = None,
    ) -> None:
        """Record what a check-in said; it waits for a press until the next one."""
        self.store.put(
            user_id,
            last_sent_at=self.clock(),
            last_message_id=message_id,
            last_text=text,
            last_items=items,
            last_cost=cost,
            awaiting=True,
        )

    # ------------------------------------------------------------------ the buttons

    async def press(self, user_id: int, action: str, ref: str) -> tuple[str, CheckinRow | None]:
        """A button under a check-in: still | done | drop | undo (a goal), snooze (a one-time reminder).
        Any press resets the back-off. Returns (what to answer, the check-in row after it)."""
        note = await self._act(user_id, action, ref)
        row = self.store.get(user_id)
        if row is None:
            return note, None
        items = [dict(i) for i in (row.last_items or [])]
        state = {"still": "still", "done": "done", "drop": "dropped", "undo": None, "snz": "snoozed"}[action]
        for item in items:
            if item.get("ref") == ref:
                item["state"] = state
        row = self.store.put(user_id, last_items=items, awaiting=False, ignored=0, level=0)
        return note, row

    async def _act(self, user_id: int, action: str, ref: str) -> str:
        if action == "still":
            return await self._still_on(user_id, ref)
        if action == "done":
            return await self._done(user_id, ref)
        if action == "drop":
            gone = await self.memory.forget(user_id, ref)
            if gone is None:
                raise CheckinInputError("That goal is already gone.")
            return "Dropped. (Undo, or /memory undo, brings it back.)"
        if action == "undo":
            undone = await self.memory.undo(user_id, ref)
            if undone is None:
                raise CheckinInputError("There is nothing to undo for that goal.")
            return "Undone: it is back."
        if action == "snz":
            return self._snooze(user_id, int(ref) if ref.isdigit() else -1)
        raise CheckinInputError("This button is not known any more.")

    async def _still_on(self, user_id: int, ref: str) -> str:
        import asyncio

        now = self.clock()
        expires = now + self.mid_ttl

        def work() -> bool:
            with self.store.sessions.begin() as s:
                mem = mq.get_memory(s, user_id, ref)
                if mem is None or mem.superseded_by is not None:
                    return False
                mem.expires_at = expires  # its certainty stays as it is
                mem.updated_at = now
                mh.record(
                    s,
                    user_id=user_id,
                    memory_id=ref,
                    action="update",
                    actor="user",
                    now=now,
                    old_text=mem.content,
                    new_text=mem.content,
                    reason=f"still on (check-in): kept until {expires:%Y-%m-%d}",
                )
                return True

        if not await asyncio.to_thread(work):
            raise CheckinInputError("That goal is not in your memory any more.")
        return f"Kept: it stays until {expires.astimezone(self._zone(user_id)[1]):%d %b %Y}."

    async def _done(self, user_id: int, ref: str) -> str:
        import asyncio

        def read() -> str | None:
            with self.store.sessions() as s:
                mem = mq.get_memory(s, user_id, ref)
                return None if mem is None or mem.superseded_by is not None else mem.content

        content = await asyncio.to_thread(read)
        if content is None:
            raise CheckinInputError("That goal is not in your memory any more.")
        if content.startswith(rules.DONE_PREFIX):
            return "It is already marked done."
        today = self.clock().astimezone(self._zone(user_id)[1])
        done = f"{rules.DONE_PREFIX}{today:%Y-%m-%d}: {content}"
        await self.memory.edit(user_id, ref, done, actor="user", reason="marked done at a check-in")
        return "Marked done. (/memory history shows the change; /memory undo reverts it.)"

    def _snooze(self, user_id: int, schedule_id: int) -> str:
        if self.snooze is None or schedule_id <= 0:
            raise CheckinInputError("That reminder is not waiting any more.")
        try:
            later = self.snooze(user_id, schedule_id, SNOOZE_MINUTES)
        except ToolError as exc:
            raise CheckinInputError(f"{str(exc)[:1].upper()}{str(exc)[1:]}.") from None
        return f"Snoozed: it comes at {later.astimezone(self._zone(user_id)[1]):%H:%M}."
