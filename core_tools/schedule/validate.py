"""Validating a schedule's input: text, kind, `at`, repeat, end, and the per-user repeat limits."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from core_tools.schedule.expand import HORIZON_YEARS, ExpansionError, aligned_start, shape_of
from core_tools.schedule.rules import (
    ZONE_SLACK,
    Repeat,
    ScheduleInputError,
    Spec,
    localize,
    occurrences_after,
    parse_datetime,
    parse_repeat,
    shortest_interval,
    wall,
)

KINDS = ("message", "task")
MAX_TEXT_CHARS = 2000
# The furthest ahead a schedule may start: far enough for any plan, near enough for datetime's range.
MAX_YEARS_AHEAD = 100


@dataclass(frozen=True)
class Limits:
    """Per-user limits (settings SCHEDULE_MAX_ACTIVE, SCHEDULE_MIN_*_INTERVAL_MIN)."""

    max_active: int = 50
    min_task_interval: timedelta = timedelta(minutes=15)
    min_message_interval: timedelta = timedelta(minutes=1)


def human_delta(delta: timedelta) -> str:
    """'45 s', '12 min', '2 h 5 min', '3 d 4 h'."""
    seconds = int(delta.total_seconds())
    if seconds < 60:
        return f"{max(seconds, 0)} s"
    minutes = seconds // 60
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h"
    return f"{hours} h {mins} min" if hours else f"{mins} min"


def build_spec(
    *,
    zone_name: str,
    kind: str,
    text: str,
    at: str | None,
    repeat: str | None,
    until: str | None,
    count: int | None,
    now: datetime,
    limits: Limits,
) -> tuple[Spec, bool, datetime]:
    """Validate a schedule; returns its spec, whether `at` had an offset, and its first fire time."""
    zone = ZoneInfo(zone_name)
    if kind not in KINDS:
        raise ScheduleInputError(f"kind must be one of {', '.join(KINDS)}")
    if not text.strip():
        raise ScheduleInputError("text is empty: say what to remind of or what to do")
    if len(text) > MAX_TEXT_CHARS:
        raise ScheduleInputError(f"text is {len(text)} characters; at most {MAX_TEXT_CHARS}")
    if count is not None and count < 1:
        raise ScheduleInputError("count must be at least 1")
    rep: Repeat | None = None
    rule_count: int | None = None
    until_at: datetime | None = None
    if repeat is not None and repeat.strip():
        rep, rule_count, until_at = parse_repeat(repeat, zone)
    if until is not None and until.strip():
        if rep is None:
            raise ScheduleInputError("until needs a repeat")
        raw_until = until.strip()
        if len(raw_until) == 10:  # a date: the whole day counts
            raw_until += "T23:59:59"
        local_until, _ = parse_datetime(raw_until, zone, "until")
        until_at = localize(local_until, zone)
    if count is not None and rep is None:
        raise ScheduleInputError("count needs a repeat")
    now_local = wall(now, zone)
    if at is None or not at.strip():
        if rep is None:
            raise ScheduleInputError("at is required for a one-time schedule")
        if rep.kind == "rrule":
            raise ScheduleInputError("at is required: it gives the RRULE its start and time of day")
        start_local, explicit = now_local.replace(second=0, microsecond=0), False
    else:
        start_local, explicit = parse_datetime(at, zone)
    if start_local.year > now_local.year + MAX_YEARS_AHEAD:
        raise ScheduleInputError(f"at {at!r} is more than {MAX_YEARS_AHEAD} years ahead")
    if rep is not None and start_local < now_local:
        # A repeating schedule may start in the past ("every weekday at 8" said at 10): it fires from
        # the next occurrence on, never for the past ones. A start long past (at=1000-01-01) is moved
        # forward by whole repeats, so the rule is the same and its times are worked out from now.
        if rep.kind == "rrule":
            start_local = aligned_start(shape_of(rep.text), start_local, now_local - ZONE_SLACK)
        else:  # a cron expression's times do not depend on its start
            start_local = max(start_local, now_local.replace(second=0, microsecond=0) - ZONE_SLACK)
    spec = Spec(start_local, rep, until_at, count if count is not None else rule_count)
    if rep is None:
        first = localize(start_local, zone)
        if first <= now:
            raise ScheduleInputError(
                f"at {at!r} is in the past: it is now {now_local:%Y-%m-%d %H:%M} in {zone_name}"
            )
    else:
        try:
            found = occurrences_after(spec, zone, now, 1)
        except ExpansionError as exc:
            raise ScheduleInputError(str(exc)) from None
        if not found:
            if until_at is not None and occurrences_after(replace(spec, until=None), zone, now, 1):
                raise ScheduleInputError(
                    f"this repeat has no occurrence between now ({now_local:%Y-%m-%d %H:%M} {zone_name}) "
                    "and its end (until)"
                )
            raise ScheduleInputError(
                f"this repeat never happens: it has no occurrence in the {HORIZON_YEARS} years after now "
                f"({now_local:%Y-%m-%d %H:%M} {zone_name}); check its BY... parts and INTERVAL"
            )
        first = found[0]  # `count` counts from here: occurrences before now are not owed
        minimum = limits.min_task_interval if kind == "task" else limits.min_message_interval
        try:
            gap = shortest_interval(spec, wall(first, zone))
        except ExpansionError as exc:
            raise ScheduleInputError(str(exc)) from None
        if gap is not None and gap < minimum:
            raise ScheduleInputError(
                f"this repeats every {human_delta(gap)}; a {kind} may repeat at most every "
                f"{human_delta(minimum)}"
            )
    return spec, explicit, first
