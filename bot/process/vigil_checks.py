"""The doctor's lines about the watchdog (bot/runtime/vigil/): `process` reads the running bot's health file
(HEALTH_FILE; the container's health check, `doctor --quick`), `watchdog` counts the conditions the
processes recorded (watchdog_events) and fails while one lasts in a live process."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from bot.config.settings import Settings
from bot.process.checks import Check
from bot.runtime.vigil.health import judge, read_health, stale_after_s

EVENT_DAYS = 7


def check_process(settings: Settings, now: float | None = None) -> Check | None:
    """The running bot's health file: missing, stale or unhealthy fails (None when HEALTH_FILE is unset)."""
    if not settings.health_file:
        return None
    tick = settings.watchdog_tick_s
    if tick <= 0:
        return Check(
            "process",
            False,
            f"HEALTH_FILE is set ({settings.health_file}) but the watchdog is off (WATCHDOG_TICK_S=0)",
            "set WATCHDOG_TICK_S (e.g. 10), or unset HEALTH_FILE",
        )
    first, age = read_health(Path(settings.health_file), time.time() if now is None else now)
    verdict = judge(first, age, stale_after_s(tick))
    fix = "see the bot's log; a stuck or stopped bot is restarted by its supervisor"
    return Check("process", verdict.ok, verdict.detail, fix)


def _aware(when: datetime) -> datetime:
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


def _local(when: datetime, now: datetime) -> str:
    local = _aware(when).astimezone()
    today = now.astimezone().date()
    return local.strftime("%H:%M") if local.date() == today else local.strftime("%b %d %H:%M")


def check_watchdog(settings: Settings) -> Check:
    """The watchdog's events of the last week: FAIL while one lasts in a live process."""
    from db.engine import make_engine
    from db.runtime import RuntimeStore
    from db.watchdog_events import WatchdogEvents

    engine = make_engine(settings.database_url)
    try:
        events = WatchdogEvents(engine).recent(EVENT_DAYS)
        store = RuntimeStore(engine, timedelta(seconds=settings.replica_lease_s))
        live = {e.process for e in events if e.ended is None and store.alive(e.process)}
    finally:
        engine.dispose()
    now = datetime.now(UTC)
    recent = [e for e in events if _aware(e.started) >= now - timedelta(days=EVENT_DAYS)]
    counted = f"{len(recent)} event(s) in {EVENT_DAYS} days" if recent else f"no event in {EVENT_DAYS} days"
    ongoing = [e for e in events if e.ended is None and e.process in live]
    if ongoing:
        now_on = "; ".join(f"{e.condition} since {_local(e.started, now)} ({e.cause})" for e in ongoing)
        return Check(
            "watchdog",
            False,
            f"{now_on}; {counted}",
            "see the bot's log for the cause; the owner is told once it clears",
        )
    if not events:
        return Check("watchdog", True, f"ok now; {counted}")
    last = events[-1]
    span = (
        f"{_local(last.started, now)}-{_local(last.ended, now)}"
        if last.ended is not None
        else f"from {_local(last.started, now)}, until its process stopped"
    )
    return Check("watchdog", True, f"ok now; {counted}, last: {last.condition} {span} ({last.cause})")
