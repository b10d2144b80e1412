"""Pure scheduling logic: `at`, RRULE and cron parsing, fire times in a zone with DST handled, descriptions.

Times are computed on the wall clock of a zone, then made absolute with `localize`: a wall time that does
not exist (the hour skipped when clocks go forward) fires at the next valid minute; one that exists twice
(clocks go back) fires once, at its first occurrence. So a daily 09:00 stays 09:00 local across DST.
Nothing here reads a clock: every function takes `now`.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError
from dateutil.rrule import rrulestr

from core_tools.errors import ToolError
from core_tools.schedule.expand import Budget, ExpansionError, check_rule, wall_times

# How far back an iteration starts before the wanted instant: more than any zone's DST shift.
ZONE_SLACK = timedelta(hours=3)
GAP_SEARCH_MINUTES = 48 * 60
# Occurrences looked at for the shortest repeat interval and for catching up after downtime.
GAP_SAMPLE = 100
CATCH_UP_LIMIT = 200_000
WEEKDAYS = {"MO": "Mon", "TU": "Tue", "WE": "Wed", "TH": "Thu", "FR": "Fri", "SA": "Sat", "SU": "Sun"}
FREQ_WORDS = {
    "YEARLY": ("year", "years"),
    "MONTHLY": ("month", "months"),
    "WEEKLY": ("week", "weeks"),
    "DAILY": ("day", "days"),
    "HOURLY": ("hour", "hours"),
    "MINUTELY": ("minute", "minutes"),
    "SECONDLY": ("second", "seconds"),
}
_CRON_FIELD = re.compile(r"^[0-9A-Za-z*/,\-LW#?]+$")


class ScheduleInputError(ToolError):
    """Bad input for a schedule: the message goes back to the model, nothing is stored."""


@dataclass(frozen=True)
class Repeat:
    """A recurrence: an RRULE body (COUNT and UNTIL taken out) or a 5-field cron expression."""

    kind: str  # rrule | cron
    text: str


@dataclass(frozen=True)
class Spec:
    """Everything that decides a schedule's fire times, except the zone (which may follow the user)."""

    start_local: datetime  # naive wall-clock time
    repeat: Repeat | None = None
    until: datetime | None = None  # aware
    count: int | None = None


def localize(naive: datetime, zone: ZoneInfo) -> datetime:
    """The UTC instant of a wall-clock time; a time in a DST gap moves to the next valid minute."""
    aware = naive.replace(tzinfo=zone, fold=0)
    utc = aware.astimezone(UTC)
    if utc.astimezone(zone).replace(tzinfo=None) == naive:
        return utc
    t = naive.replace(second=0, microsecond=0)
    for _ in range(GAP_SEARCH_MINUTES):
        t += timedelta(minutes=1)
        candidate = t.replace(tzinfo=zone).astimezone(UTC)
        if candidate.astimezone(zone).replace(tzinfo=None) == t:
            return candidate
    return utc  # no zone has a gap this long; keep the offset zoneinfo chose


def wall(instant: datetime, zone: ZoneInfo) -> datetime:
    """The naive wall-clock time of an aware instant in a zone."""
    return instant.astimezone(zone).replace(tzinfo=None)


def parse_datetime(value: str, zone: ZoneInfo, what: str = "at") -> tuple[datetime, bool]:
    """An ISO 8601 date-time as naive wall time in `zone`, and whether it carried an offset."""
    raw = value.strip()
    if raw.endswith(("Z", "z")):
        raw = raw[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(raw)
    except ValueError:
        raise ScheduleInputError(
            f"{what} {value[:60]!r} is not an ISO 8601 date-time; use e.g. 2026-11-24T09:00 (the user's "
            "local time) or 2026-11-24T08:00+00:00"
        ) from None
    if parsed.tzinfo is None:
        return parsed.replace(microsecond=0), False
    return wall(parsed, zone).replace(microsecond=0), True


def _split_rrule(text: str) -> tuple[str, int | None, str | None]:
    body = text.strip()
    if body.upper().startswith("RRULE:"):
        body = body[6:]
    parts, count, until = [], None, None
    for part in body.split(";"):
        key, _, value = part.strip().partition("=")
        key = key.upper()
        if not key:
            continue
        if key == "COUNT":
            if not value.isdigit() or int(value) < 1:
                raise ScheduleInputError(f"COUNT={value!r} in the RRULE must be a positive whole number")
            count = int(value)
        elif key == "UNTIL":
            until = value
        elif key in ("DTSTART", "TZID"):
            raise ScheduleInputError("put the start in `at`, not in the RRULE")
        else:
            parts.append(f"{key}={value.upper()}")
    return ";".join(parts), count, until


def _rrule_until(value: str, zone: ZoneInfo) -> datetime:
    raw = value.strip().upper()
    try:
        if raw.endswith("Z"):
            return datetime.strptime(raw, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        fmt = "%Y%m%dT%H%M%S" if "T" in raw else "%Y%m%d"
        local = datetime.strptime(raw, fmt)
    except ValueError:
        raise ScheduleInputError(f"UNTIL={value!r} in the RRULE is not a date such as 20261231") from None
    if "T" not in raw:
        local = local.replace(hour=23, minute=59, second=59)
    return localize(local, zone)


def parse_repeat(text: str, zone: ZoneInfo) -> tuple[Repeat, int | None, datetime | None]:
    """A repeat (RRULE or 5-field cron), with the COUNT and UNTIL an RRULE carried; raise when it is bad."""
    raw = " ".join(text.split())
    if not raw:
        raise ScheduleInputError("repeat is empty")
    if "=" in raw or raw.upper().startswith("RRULE"):
        body, count, until_raw = _split_rrule(raw)
        if "FREQ=" not in body:
            raise ScheduleInputError(f"the RRULE {text[:80]!r} has no FREQ (e.g. FREQ=DAILY)")
        try:
            rrulestr(f"RRULE:{body}", dtstart=datetime(2026, 1, 1, 9, 0))
        except (ValueError, TypeError) as exc:
            raise ScheduleInputError(f"the RRULE {text[:80]!r} does not parse: {exc}") from None
        try:
            check_rule(body)
        except ExpansionError as exc:
            raise ScheduleInputError(str(exc)) from None
        until = _rrule_until(until_raw, zone) if until_raw else None
        return Repeat("rrule", body), count, until
    fields = raw.split(" ")
    if len(fields) != 5 or not all(_CRON_FIELD.match(f) for f in fields):
        raise ScheduleInputError(
            f"repeat {text[:80]!r} is neither an iCalendar RRULE (e.g. FREQ=WEEKLY;BYDAY=MO,WE,FR) nor a "
            "5-field cron expression (minute hour day month weekday, e.g. 0 8 * * 1-5)"
        )
    try:
        CronSim(raw, datetime(2026, 1, 1))
    except (CronSimError, ValueError) as exc:
        raise ScheduleInputError(f"the cron expression {raw!r} does not parse: {exc}") from None
    return Repeat("cron", raw), None, None


def _wall_times(spec: Spec, after_local: datetime, budget: Budget) -> Iterator[datetime]:
    """Naive wall-clock occurrences at or after `after_local` (not before the start), in order; bounded
    (see expand.py): ExpansionError past the budget."""
    start = spec.start_local
    if spec.repeat is None:
        if start >= after_local:
            yield start
        return
    begin = max(start, after_local)
    if spec.repeat.kind == "rrule":
        yield from wall_times(spec.repeat.text, start, begin, budget)
        return
    # cronsim iterates the naive wall clock for fixed-time expressions (Debian cron semantics); we
    # localize every result ourselves, so it gets naive input and gives naive output. It refuses
    # impossible days itself and starts at `begin`, not at the schedule's start.
    it = CronSim(spec.repeat.text, begin - timedelta(seconds=1))
    for t in it:
        budget.step()
        yield t.replace(tzinfo=None)


def occurrences_after(
    spec: Spec, zone: ZoneInfo, after: datetime, limit: int, budget: Budget | None = None
) -> list[datetime]:
    """Up to `limit` UTC fire times strictly after `after` (aware), ignoring COUNT (see next_fire);
    within expand.HORIZON_YEARS, ExpansionError when the rule is too costly to work out."""
    out: list[datetime] = []
    last = after
    for local in _wall_times(spec, wall(after, zone) - ZONE_SLACK, budget or Budget()):
        instant = localize(local, zone)
        if instant <= last:  # before `after`, or a second wall time folded onto the same instant
            continue
        if spec.until is not None and instant > spec.until:
            break
        out.append(instant)
        last = instant
        if len(out) >= limit:
            break
    return out


def first_fire(spec: Spec, zone: ZoneInfo) -> datetime | None:
    """The first fire time of a schedule (its start, for a one-shot)."""
    if spec.repeat is None:
        return localize(spec.start_local, zone)
    found = occurrences_after(spec, zone, localize(spec.start_local, zone) - timedelta(seconds=1), 1)
    return found[0] if found else None


def advance(
    spec: Spec, zone: ZoneInfo, due: datetime, now: datetime, fired: int
) -> tuple[int, datetime | None]:
    """After the occurrence `due` fired at `now`: how many occurrences it consumed (itself and the ones
    missed while the bot was down, which fold into it) and the next fire time after `now` (None: ended)."""
    if spec.repeat is None:
        return 1, None
    consumed, last, nxt, counted = 1, due, None, False
    # One pass over the occurrences: a long downtime of a frequent repeat costs one iteration each.
    try:
        for local in _wall_times(spec, wall(due, zone) - ZONE_SLACK, Budget(steps=CATCH_UP_LIMIT)):
            instant = localize(local, zone)
            if instant <= last:
                continue
            if spec.until is not None and instant > spec.until:
                counted = True
                break
            if instant > now:
                nxt, counted = instant, True
                break
            consumed += 1
            last = instant
        else:
            counted = True
    except ExpansionError:  # too many to count: the next one after now is all that matters
        pass
    if not counted:
        found = occurrences_after(spec, zone, now, 1)
        nxt = found[0] if found else None
    if nxt is not None and spec.count is not None and fired + consumed >= spec.count:
        return consumed, None
    return consumed, nxt


def rebased_start(spec: Spec, zone: ZoneInfo, nxt: datetime) -> datetime | None:
    """A later start for an hourly or more frequent RRULE: its next occurrence's wall time.

    dateutil iterates an RRULE from its start, so a minutely reminder a year old would walk half a million
    occurrences at each firing. Starting from one of its own occurrences gives the same later occurrences
    for these frequencies (the phase of INTERVAL and the defaults taken from the start are kept).
    None when the rule is not such a rule or `nxt` was moved by a DST gap.
    """
    if spec.repeat is None or spec.repeat.kind != "rrule":
        return None
    if not any(f"FREQ={f}" in spec.repeat.text for f in ("HOURLY", "MINUTELY", "SECONDLY")):
        return None
    local = wall(nxt, zone)
    return local if localize(local, zone) == nxt else None


def shortest_interval(spec: Spec, from_local: datetime) -> timedelta | None:
    """The shortest gap between consecutive wall-clock occurrences among the first ones from `from_local`
    (None: fewer than 2)."""
    if spec.repeat is None:
        return None
    times: list[datetime] = []
    for t in _wall_times(spec, from_local, Budget()):
        times.append(t)
        if len(times) >= GAP_SAMPLE or (spec.count is not None and len(times) >= spec.count):
            break
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return min(gaps) if gaps else None


def _plural(n: int, words: tuple[str, str]) -> str:
    return words[0] if n == 1 else f"{n} {words[1]}"


def describe_repeat(repeat: Repeat, start_local: datetime) -> str:
    """A human-readable recurrence: 'every week on Mon, Wed, Fri at 09:00', 'At 08:00 on Monday'."""
    if repeat.kind == "cron":
        try:
            text = CronSim(repeat.text, datetime(2026, 1, 1)).explain()
        except Exception:  # explain() is best effort; the expression itself already parsed
            text = f"cron {repeat.text}"
        return text[:1].lower() + text[1:]
    params = dict(p.split("=", 1) for p in repeat.text.split(";") if "=" in p)
    freq = params.get("FREQ", "DAILY")
    interval = int(params.get("INTERVAL", "1") or 1)
    words = FREQ_WORDS.get(freq, ("time", "times"))
    text = f"every {_plural(interval, words)}"
    if "BYDAY" in params:
        days = [WEEKDAYS.get(d, d) for d in params["BYDAY"].split(",")]
        text += f" on {', '.join(days)}"
    if "BYMONTHDAY" in params:
        text += f" on day {params['BYMONTHDAY']}"
    if freq in ("YEARLY", "MONTHLY", "WEEKLY", "DAILY") and not ({"BYHOUR", "BYMINUTE"} & params.keys()):
        text += f" at {start_local:%H:%M}"
    elif {"BYHOUR", "BYMINUTE"} & params.keys():
        hours = params.get("BYHOUR", str(start_local.hour))
        minutes = params.get("BYMINUTE", str(start_local.minute))
        text += f" (hours {hours}, minutes {minutes})"
    return text


def describe(spec: Spec, zone_name: str) -> str:
    """One line: when the schedule fires, in words, with its zone and any end."""
    if spec.repeat is None:
        return f"once, on {spec.start_local:%a %d %b %Y at %H:%M} ({zone_name})"
    text = f"{describe_repeat(spec.repeat, spec.start_local)} ({zone_name}), from {spec.start_local:%d %b %Y}"
    if spec.count is not None:
        text += f", {spec.count} time{'s' if spec.count != 1 else ''} in all"
    if spec.until is not None:
        text += f", until {spec.until.astimezone(ZoneInfo(zone_name)):%d %b %Y %H:%M}"
    return text
