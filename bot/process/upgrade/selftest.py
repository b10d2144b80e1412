"""The self-test an upgrade runs on the migrated copy before the live database is touched.

- doctor's local probes (the database at head; PostgreSQL's extensions);
- the services built on the copy, as the bot builds them, with a built-in model instead of the provider
  (core_tools.llm.testing.FunctionModel: no provider call, no cost), and one scripted turn through the real
  loop (the prompt with its memories and history, the answer streamed and stored);
- a recall of an existing memory (the newest current one) by its own words: it must come back;
- the next firings of every live schedule computed from its stored rule;
- the sandbox toolkit: the code tool's modules import, and an installed toolkit imports in a real run.
Each is one Check line; the upgrade goes on only when none failed.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.engine import make_url

from bot.config.settings import Settings
from bot.process.checks import Check
from core_tools.agent import TurnInput
from core_tools.llm.testing import FunctionModel, ModelCall
from core_tools.text import clip
from db.engine import make_engine
from db.memories import active_filter
from db.models import Memory, Schedule, utcnow
from db.schedules import LIVE
from db.speakers import Speaker
from db.usage import UsageLog

if TYPE_CHECKING:
    from bot.runtime.services import Services

Say = Callable[[str], None]
ANSWER = "Upgrade self-test: the loop answers."
PROMPT = "This is the upgrade's self-test: answer with one line."
TOOLKIT_MODULES = ("core_tools.sandbox", "core_tools.sandbox.toolkit", "core_tools.code.tool")
PROBE_TIMEOUT_S = 60.0


class _TurnSink:
    """What the scripted turn shows: its last text."""

    def __init__(self) -> None:
        self.shown = ""

    async def text(self, partial: str) -> None:
        self.shown = partial

    async def status(self, line: str) -> None:
        return None


def _answer(call: ModelCall) -> str:
    # Background requests (a session summary, the memory judge) get a short plain answer too.
    return ANSWER if call.purpose == "chat" else "ok"


def _failed(name: str, exc: BaseException) -> Check:
    return Check(name, False, clip(f"{type(exc).__name__}: {exc}", 300))


async def self_test(settings: Settings, before: Before, say: Say) -> list[Check]:
    """Every check on the database `settings.database_url` names (the migrated copy); `before`: what it
    held before it was migrated."""
    from bot.process.db_checks import check_postgresql, revision_check
    from bot.process.wiring import build_services

    checks = [await asyncio.to_thread(revision_check, settings)]
    if make_url(settings.database_url).get_backend_name() == "postgresql":
        pg = await asyncio.to_thread(check_postgresql, settings)
        if pg is not None:
            checks.append(pg)
    if not all(c.ok for c in checks):
        return checks
    model: dict[str, FunctionModel] = {}

    def make_model(usage: UsageLog, budget: object) -> FunctionModel:
        model["it"] = FunctionModel(_answer, model=settings.models[0], recorder=usage)
        return model["it"]

    try:
        services = await asyncio.to_thread(build_services, settings, None, model=make_model)
    except Exception as exc:
        return [*checks, _failed("services", exc)]
    try:
        checks.append(Check("services", True, "built on the copy with the built-in model"))
        probes: list[tuple[str, Awaitable[Check]]] = [
            ("turn", _turn(settings, services)),
            ("recall", _recall(services, before)),
            ("schedules", _schedules(services, before)),
            ("toolkit", _toolkit(services)),
        ]
        for name, probe in probes:
            try:
                check = await asyncio.wait_for(probe, PROBE_TIMEOUT_S)
            except Exception as exc:
                check = _failed(name, exc)
            checks.append(check)
            say(check.line())
    finally:
        await services.aclose()
    return checks


async def _turn(settings: Settings, services: Services) -> Check:
    user = settings.owner_id or 0
    sink = _TurnSink()
    result = await services.agent.run_turn(TurnInput(Speaker(user, user, "private"), PROMPT), sink)
    session = services.conversations.current_session(user, user)
    stored = [m.content for m in services.conversations.messages(session.id)]
    if result.text != ANSWER or sink.shown != ANSWER or stored[-2:] != [PROMPT, ANSWER]:
        return Check(
            "turn", False, f"the scripted turn answered {clip(result.text, 80)!r}, stored {len(stored)}"
        )
    return Check("turn", True, "one scripted turn through the loop, streamed and stored")


@dataclass(frozen=True)
class Before:
    """What the copy held before it was migrated, for the self-test to find again afterwards: the newest
    current memory of the first user who has one, and the live schedules."""

    memory: tuple[int, str, str] | None  # user id, public id, content
    schedules: tuple[int, ...]


def read_before(database_url: str) -> Before:
    """Read `Before` from the copy at its old revision (a few long-standing columns of memories and
    schedules, which the revisions this release upgrades from all have)."""
    engine = make_engine(database_url)
    try:
        with engine.connect() as conn:
            memory = None
            users = conn.execute(select(Memory.user_id).distinct().order_by(Memory.user_id)).scalars().all()
            for user in users:
                row = conn.execute(
                    select(Memory.public_id, Memory.content)
                    .where(active_filter(int(user), utcnow()))
                    .order_by(Memory.id.desc())
                    .limit(1)
                ).first()
                if row is not None:
                    memory = (int(user), str(row[0]), str(row[1]))
                    break
            live = select(Schedule.id).where(Schedule.status.in_(list(LIVE))).order_by(Schedule.id)
            schedules = tuple(int(i) for i in conn.execute(live).scalars())
    finally:
        engine.dispose()
    return Before(memory, schedules)


async def _recall(services: Services, before: Before) -> Check:
    if before.memory is None:
        return Check("recall", True, "no memories stored yet: nothing to recall")
    user, memory_id, content = before.memory
    hits = await services.memory.recall(user, content, limit=10)
    if not any(h.get("id") == memory_id for h in hits):
        return Check("recall", False, f"the memory {memory_id} was not recalled by its own words")
    return Check("recall", True, f"memory {memory_id} recalled by its own words ({len(hits)} hit(s))")


async def _schedules(services: Services, before: Before) -> Check:
    service = services.schedules.service

    def work() -> list[int]:
        missing = []
        for schedule_id in before.schedules:
            row = service.store.get(schedule_id)
            if row is None or (row.next_fire_at is not None and not service.next_times(row)):
                missing.append(schedule_id)
        return missing

    missing = await asyncio.to_thread(work)
    total = len(before.schedules)
    if missing:
        shown = ", ".join(str(i) for i in missing[:5])
        return Check(
            "schedules", False, f"{len(missing)} of {total} live schedule(s) lost their times ({shown})"
        )
    return Check("schedules", True, f"the next firings of {total} live schedule(s) worked out")


async def _toolkit(services: Services) -> Check:
    from bot.process.db_checks import check_toolkit

    for module in TOOLKIT_MODULES:
        importlib.import_module(module)
    check = await check_toolkit(services)
    return Check("toolkit", check.ok, f"modules import; {check.detail}", check.fix, warning=check.warning)
