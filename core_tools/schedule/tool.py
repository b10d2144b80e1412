"""The `schedule` tool: reminders (delivered as is) and tasks (run through the turn loop) at a time."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Annotated, Any, Literal

from pydantic import Field

from core_tools.capabilities import declares
from core_tools.schedule.rules import ScheduleInputError
from core_tools.schedule.service import ScheduleService
from core_tools.types import ToolContext, is_private


class ScheduleTool:
    """Wraps ScheduleService for the model; `wake` tells the bot's clock that the next time may be sooner."""

    def __init__(self, service: ScheduleService, wake: Callable[[], None] | None = None) -> None:
        self.service = service
        self.wake = wake or (lambda: None)

    @declares(reads=["schedules"], writes=["schedules"])
    async def schedule(
        self,
        ctx: ToolContext,
        action: Annotated[
            Literal["create", "list", "cancel", "update"],
            Field(
                description="create a reminder or task; list the user's schedules; cancel or update one by id"
            ),
        ],
        text: Annotated[
            str | None,
            Field(description="create/update: what to say (kind message) or what to do (kind task)"),
        ] = None,
        at: Annotated[
            str | None,
            Field(
                description="create/update: ISO 8601 date-time of the (first) time, e.g. 2026-11-24T09:00; "
                "without an offset it is the user's local time (convert 'tomorrow at 9' yourself)"
            ),
        ] = None,
        repeat: Annotated[
            str | None,
            Field(
                description="optional: an iCalendar RRULE such as FREQ=WEEKLY;BYDAY=MO,WE,FR or a 5-field "
                "cron expression such as '0 8 * * 1-5'; update: 'none' makes it one-time"
            ),
        ] = None,
        kind: Annotated[
            Literal["message", "task"],
            Field(
                description="message: the text is delivered as is (no model call); task: at that time the "
                "text runs as a prompt with tools and the answer is delivered"
            ),
        ] = "message",
        until: Annotated[
            str | None, Field(description="optional, with repeat: last date or date-time (local)")
        ] = None,
        count: Annotated[
            int | None, Field(ge=1, le=10000, description="optional, with repeat: how many times in all")
        ] = None,
        id: Annotated[int | None, Field(description="cancel/update: the schedule's id")] = None,
        max_cost_per_month: Annotated[
            float | None,
            Field(
                description="optional, kind task: the most it may spend in a calendar month, in USD; runs "
                "past it are skipped until the next month (update: 0 removes the limit)"
            ),
        ] = None,
    ) -> dict[str, Any]:
        """Schedule reminders and tasks at a time in the user's zone, once or repeating; list, cancel, update.

        Returns the schedule's id, its next fire times in the user's local time and a description; for a
        task also `forecast` (its expected cost per run and per month): tell the user its `text`.
        """
        svc = self.service
        # In a group only that group's schedules of the user are visible: private reminders stay private.
        scope = None if is_private(ctx.chat_type, ctx.user_id, ctx.chat_id) else ctx.chat_id
        # Working out a repeat's times is bounded but CPU work, and the store is blocking I/O: both run in
        # a worker thread, so other chats are served meanwhile.
        if action == "list":
            items = await asyncio.to_thread(svc.list_for, ctx.user_id, scope)
            return {"ok": True, "schedules": items, "count": len(items)}
        if action == "create":
            if text is None:
                raise ScheduleInputError("create needs text")
            created = await asyncio.to_thread(
                svc.create,
                user_id=ctx.user_id,
                chat_id=ctx.chat_id,
                chat_type=ctx.chat_type,
                text=text,
                at=at,
                repeat=repeat,
                kind=kind,
                until=until,
                count=count,
                max_cost_per_month=max_cost_per_month,
            )
            self.wake()
            return {"ok": True, **created}
        if id is None:
            raise ScheduleInputError(f"{action} needs the schedule's id (action list shows them)")
        if action == "cancel":
            return {"ok": True, **await asyncio.to_thread(svc.cancel, ctx.user_id, id, scope)}
        updated = await asyncio.to_thread(
            svc.update,
            ctx.user_id,
            id,
            chat_scope=scope,
            text=text,
            at=at,
            repeat=repeat,
            until=until,
            count=count,
            max_cost_per_month=max_cost_per_month,
        )
        self.wake()
        return {"ok": True, **updated}
