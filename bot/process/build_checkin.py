"""The check-in service (core_tools/checkin/), built from the settings and the services it stands on: the
schedules (its time), the memory store (its buttons), the usage service (caps near their limit, the
digest's price) and the LLM client's model."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from sqlalchemy.orm import Session, sessionmaker

from bot.config.settings import Settings
from core_tools.checkin.digest import MAX_TOKENS, PROMPT_TOKENS
from core_tools.checkin.rules import CapFigure, Limits
from core_tools.checkin.service import CheckinService
from core_tools.llm import ChatClient
from core_tools.memory.store import MemoryStore
from core_tools.schedule.tool import ScheduleTool
from core_tools.usage import UsageService
from core_tools.usage.caps import KINDS, PERIODS
from db.checkins import Checkins


def checkin_service(
    settings: Settings,
    sm: sessionmaker[Session],
    schedules: ScheduleTool,
    memory: MemoryStore,
    budget: UsageService,
    llm: ChatClient,
) -> CheckinService:
    """Check-ins on the schedules' store and clock (a test that moves the schedules' clock moves both)."""
    service = schedules.service

    def caps(user_ids: Sequence[int]) -> dict[int, list[CapFigure]]:
        # Without default caps only users with an owner-set one can be near a cap: one query finds them,
        # instead of one per user due (a thousand check-ins at 09:00).
        defaults = any(budget.defaults.get(p, k) is not None for p in PERIODS for k in KINDS)
        capped = set(user_ids) if defaults else {r.user_id for r in budget.budget_overrides() if r.limit}
        return {
            u: [CapFigure(c.period, c.kind, c.limit, c.spent + c.reserved) for c in budget.cap_status(u)]
            for u in user_ids
            if u in capped
        }

    return CheckinService(
        Checkins(sm),
        service.store,
        service.zone_of_user,
        memory,
        caps=caps,
        limits=Limits(
            near=timedelta(days=settings.checkin_near_expiry_days),
            quiet=timedelta(days=settings.checkin_quiet_days),
            cap_near=settings.checkin_cap_near_percent / 100,
            max_items=settings.checkin_max_items,
        ),
        mid_ttl=timedelta(days=settings.memory_mid_ttl_days),
        clock=lambda: service.clock(),
        digest_price=lambda: budget.prices.cost(llm.model, PROMPT_TOKENS, MAX_TOKENS),
        snooze=service.snooze_next,
    )
