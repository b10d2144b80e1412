"""Delivering due check-ins (core_tools/checkin/): the schedule runner hands over their firings.

A check-in firing is claimed like a reminder's (`sending` before anything leaves, by the process holding
the reminders' lease), planned in a worker thread (batched reads, no LLM), then either recorded as
`skipped` (nothing due: nothing sent, no token spent) or sent through the outbox with its buttons. A digest
(`/checkin ... digest`) makes one LLM request, purpose `checkin`, held against the caps and accounted to the
check-in's schedule like a task's run; its text is kept on the firing before sending, so a failed send is
retried with it, never by asking the model again. The words come from bot/texts/checkin.py through
`compose` (the composition root gives it: the runtime is below the texts).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bot.runtime.outbox import Blocked, Buttons, DeliveryFailed, Outbox
from bot.runtime.services import Services
from core_tools.checkin.digest import MAX_TOKENS, PURPOSE, digest_messages
from core_tools.checkin.service import CheckinService, Plan
from core_tools.errors import BudgetExceeded
from db.attribution import TaskRun, running_task
from db.schedules import FiringRow

log = logging.getLogger(__name__)

SEND_CONCURRENCY = 16  # check-ins in flight at once (as the reminders' sends)


@dataclass(frozen=True)
class Message:
    """What a check-in says: its items (with the back-off `note`) or a digest's text over them."""

    items: list[dict[str, Any]]
    note: str | None
    cadence: str
    digest: str | None = None
    digest_note: str | None = None  # why a chosen digest was not written (a cap)


Compose = Callable[[Message], tuple[str, Buttons]]


class CheckinDelivery:
    """Plans and sends check-in firings for the schedule runner."""

    def __init__(self, services: Services, service: CheckinService, outbox: Outbox, compose: Compose) -> None:
        self.services = services
        self.service = service
        self.outbox = outbox
        self.compose = compose

    async def deliver(self, firings: list[FiringRow]) -> None:
        """Plan and send these check-in firings (claimed as `sending` first)."""
        schedules = self.services.schedules.service
        schedules.mark_sending([f.id for f in firings])
        plans = await asyncio.to_thread(self.service.plan, firings)
        results: list[tuple[int, dict[str, Any]]] = []
        sending = []
        for plan in plans:
            if not plan.items or plan.row is None:
                log.info("check-in of user %s: %s, nothing sent", plan.firing.user_id, plan.skip_reason)
                results.append((plan.firing.id, {"status": "skipped", "error": plan.skip_reason}))
            else:
                sending.append(plan)
        schedules.record(results)
        slots = asyncio.Semaphore(SEND_CONCURRENCY)

        async def send(plan: Plan) -> tuple[int, dict[str, Any]]:
            async with slots:
                try:
                    return await self._send(plan)
                except Exception:  # one user's failure must not fail the others' check-ins
                    f = plan.firing
                    log.exception("check-in of user %s failed", f.user_id)
                    return f.id, schedules.outcome_failed(f.attempts + 1, "internal error")

        schedules.record(list(await asyncio.gather(*(send(p) for p in sending))))

    async def _send(self, plan: Plan) -> tuple[int, dict[str, Any]]:
        f, row = plan.firing, plan.row
        assert row is not None
        schedules = self.services.schedules.service
        digest, digest_note, cost = f.result_text, None, None
        if row.digest and digest is None:
            digest, digest_note, cost = await self._digest(f, plan.items)
            if digest is not None:
                schedules.record([(f.id, {"result_text": digest})])
        text, buttons = self.compose(Message(plan.items, plan.note, row.cadence, digest, digest_note))
        attempts = f.attempts + 1
        try:
            message_id = await self.outbox.send(f.chat_id, text, buttons=buttons)
        except Blocked as exc:
            schedules.pause_chat(f.chat_id, "blocked")
            return f.id, schedules.outcome_failed(attempts, f"forbidden: {exc}")
        except DeliveryFailed as exc:
            log.warning("check-in of user %s could not be sent: %s", f.user_id, exc)
            return f.id, schedules.outcome_retry(attempts, str(exc))
        await asyncio.to_thread(self.service.sent, f.user_id, plan.items, text, message_id, cost)
        log.info("check-in of user %s sent: %d item(s)", f.user_id, len(plan.items))
        return f.id, schedules.outcome_sent(message_id)

    async def _digest(
        self, f: FiringRow, items: list[dict[str, Any]]
    ) -> tuple[str | None, str | None, float | None]:
        """One LLM request over the items: (its text, why there is none, its estimated cost)."""
        llm = self.services.llm
        try:
            # Accounted to the check-in's schedule like a task's run; the caps are checked before it.
            with running_task(TaskRun(f.user_id, f.schedule_id, f.id, None)):
                reply = await llm.complete(
                    digest_messages(items),
                    purpose=PURPOSE,
                    user_id=f.user_id,
                    max_completion_tokens=MAX_TOKENS,
                )
        except BudgetExceeded as exc:
            return None, str(exc), None
        except Exception as exc:  # the template still goes out: the check-in does not depend on the model
            log.warning("check-in digest of user %s failed: %s", f.user_id, exc)
            return None, "the digest could not be written just now", None
        prices = self.services.usage_service.prices
        cost = prices.cost(reply.model or llm.model, reply.usage.prompt_tokens, reply.usage.completion_tokens)
        text = reply.content.strip()
        return (text or None), (None if text else "the digest came back empty"), cost
