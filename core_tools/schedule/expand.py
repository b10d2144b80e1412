"""Bounded expansion of an RRULE: every call ends after a known, small amount of work.

dateutil walks an RRULE period by period from its start, and stops only at an occurrence past UNTIL, at
COUNT or at the year 9999. Three things made that unbounded:

- a start far in the past (`at=1000-01-01`, minutely): every period since then is walked. The start is
  moved forward by whole INTERVALs of periods, keeping its month, day, weekday and time of day, so the
  rule is the same rule and the walk starts next to the wanted time (`aligned_start`; pure arithmetic).
- a rule with no occurrence (`BYMONTH=2;BYMONTHDAY=30`, or `FREQ=DAILY;INTERVAL=7;BYDAY=TU` started on a
  Monday): dateutil walks every day up to the year 9999 (seconds) looking for one. Only rules that can
  skip periods (day-level parts such as BYMONTH, BYDAY, BYSETPOS) can do that; those are walked on a
  calendar moved to the last years before 9999 (`_calendar_shift`): the years looked at (the search
  horizon) are mapped onto years of the same kinds (leap or not, same weekday of 1 January) in the same
  phase of the INTERVAL, so the walk finds the same occurrences and ends by itself within a few decades.
- a period with very many candidate times (`FREQ=YEARLY` at every minute of the year): refused when
  the rule is made (`check_rule`).

On top of that every expansion counts the occurrences it looks at and the time it takes (`Budget`).
"""

from __future__ import annotations

import calendar
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime, timedelta

from dateutil.rrule import rrulestr

from core_tools.errors import ToolError

# Occurrences are looked for this far after the wanted time: a rule with none in that time "never happens".
HORIZON_YEARS = 30
HORIZON = timedelta(days=366 * HORIZON_YEARS)
MIN_HORIZON = timedelta(days=2 * 366)
# The most candidate times one period of a rule may have (days in the period x times of day).
MAX_PERIOD_CANDIDATES = 20_000
MAX_INTERVAL = 10_000
# The most days dateutil may look at without finding an occurrence, estimated before the walk: ~1 s.
# (A search horizon that holds a century year such as 2100 maps only onto years 400*k later, leaving up to
# 300 years between the horizon and 9999: about 110,000 days.)
MAX_EMPTY_WALK = 120_000
# The most occurrences, and seconds, one expansion may take (the bound of last resort).
MAX_STEPS = 250_000
MAX_SECONDS = 10.0
LAST_YEAR = 9999  # datetime.MAXYEAR: dateutil ends its walk there

DAY_PARTS = ("BYMONTH", "BYMONTHDAY", "BYYEARDAY", "BYWEEKNO", "BYDAY", "BYSETPOS")
SUB_DAILY = {"HOURLY": 24, "MINUTELY": 24 * 60}  # units in a day
DAYS_PER_PERIOD = {"YEARLY": 366, "MONTHLY": 31, "WEEKLY": 7}
PERIOD_WORDS = {"YEARLY": "year", "MONTHLY": "month", "WEEKLY": "week", "DAILY": "day"}
WEEKDAY_INDEX = {"MO": 0, "TU": 1, "WE": 2, "TH": 3, "FR": 4, "SA": 5, "SU": 6}


class ExpansionError(ToolError):
    """A repeat whose times cannot be worked out within the bounds (the message says why)."""


class Budget:
    """How many occurrences, and how long, one expansion may take."""

    def __init__(self, steps: int = MAX_STEPS, seconds: float = MAX_SECONDS) -> None:
        self.left = steps
        self.deadline = time.monotonic() + seconds

    def step(self) -> None:
        """Count one occurrence looked at; raise ExpansionError past the limits."""
        self.left -= 1
        if self.left < 0 or (self.left % 1024 == 0 and time.monotonic() > self.deadline):
            raise ExpansionError("working out the times of this repeat takes too long; make it simpler")


@dataclass(frozen=True)
class Shape:
    """What bounds an RRULE's walk: its frequency, INTERVAL and parts (upper-case, COUNT/UNTIL removed)."""

    freq: str
    interval: int
    parts: dict[str, str]

    @property
    def skips_periods(self) -> bool:
        """Whether a period may have no occurrence: a day-level part, given or taken from the start."""
        return self.freq in DAYS_PER_PERIOD or any(p in self.parts for p in DAY_PARTS)


def shape_of(body: str) -> Shape:
    """The shape of an RRULE body such as FREQ=WEEKLY;INTERVAL=2;BYDAY=MO."""
    parts = dict(p.split("=", 1) for p in body.split(";") if "=" in p)
    freq = parts.pop("FREQ", "DAILY")
    raw = parts.pop("INTERVAL", "1")
    interval = int(raw) if raw.isdigit() else 1
    return Shape(freq, max(interval, 1), parts)


def _size(parts: dict[str, str], key: str) -> int:
    return len({v for v in parts[key].split(",") if v}) if key in parts else 1


def check_rule(body: str) -> Shape:
    """Refuse, at once, the rules whose times could not be worked out within the bounds."""
    shape = shape_of(body)
    if shape.freq == "SECONDLY":
        raise ExpansionError("FREQ=SECONDLY is not supported; the most frequent repeat is FREQ=MINUTELY")
    if shape.interval > MAX_INTERVAL:
        raise ExpansionError(f"INTERVAL={shape.interval} is too large; at most {MAX_INTERVAL}")
    if "BYEASTER" in shape.parts:
        raise ExpansionError("BYEASTER is not supported")
    if shape.freq in SUB_DAILY and "BYSETPOS" in shape.parts:
        raise ExpansionError(f"BYSETPOS is not supported with FREQ={shape.freq}; use FREQ=DAILY or longer")
    if shape.freq not in SUB_DAILY:
        times = _size(shape.parts, "BYHOUR") * _size(shape.parts, "BYMINUTE") * _size(shape.parts, "BYSECOND")
        per_period = times * DAYS_PER_PERIOD.get(shape.freq, 1)
        if per_period > MAX_PERIOD_CANDIDATES:
            raise ExpansionError(
                f"this repeat has up to {per_period} times in each {PERIOD_WORDS.get(shape.freq, 'day')}; "
                f"at most {MAX_PERIOD_CANDIDATES} (for frequent times use FREQ=HOURLY or "
                "FREQ=MINUTELY with INTERVAL)"
            )
    return shape


def _add_months(start: datetime, months: int) -> datetime | None:
    index = start.year * 12 + start.month - 1 + months
    year, month = divmod(index, 12)
    if not 1 <= year <= LAST_YEAR or start.day > calendar.monthrange(year, month + 1)[1]:
        return None
    return start.replace(year=year, month=month + 1)


def _period(shape: Shape, t: datetime) -> int:
    """The index of the period (of the rule's frequency) that holds `t`."""
    if shape.freq == "YEARLY":
        return t.year
    if shape.freq == "MONTHLY":
        return t.year * 12 + t.month - 1
    day = t.toordinal()
    if shape.freq == "WEEKLY":
        wkst = WEEKDAY_INDEX.get(shape.parts.get("WKST", "MO"), 0)
        return (day - (t.weekday() - wkst) % 7) // 7
    if shape.freq == "DAILY":
        return day
    minutes = (day * 24 + t.hour) * 60 + t.minute
    return minutes // 60 if shape.freq == "HOURLY" else minutes


def _moved(shape: Shape, start: datetime, periods: int) -> datetime | None:
    """`start` moved by a number of periods, its fields kept (None: that date does not exist)."""
    if shape.freq == "YEARLY":
        return _add_months(start, 12 * periods)
    if shape.freq == "MONTHLY":
        return _add_months(start, periods)
    unit = {"WEEKLY": timedelta(weeks=1), "DAILY": timedelta(days=1), "HOURLY": timedelta(hours=1)}
    return start + unit.get(shape.freq, timedelta(minutes=1)) * periods


def aligned_start(shape: Shape, start: datetime, target: datetime) -> datetime:
    """The latest start the rule may be given instead of `start` with the same occurrences from `target` on.

    It is `start` moved by whole INTERVALs of periods (so the phase of INTERVAL and the month, day, weekday
    and time the rule takes from its start are kept), with the period it falls in wholly before `target`'s
    (dateutil treats the first period specially: it begins at the start).
    """
    k = (_period(shape, target) - _period(shape, start) - 1) // shape.interval
    # A 29 February or a 31st does not exist in every year or month: move one INTERVAL less, a few times.
    for tries in range(400):
        if k - tries <= 0:
            return start
        moved = _moved(shape, start, (k - tries) * shape.interval)
        if moved is not None:
            return moved
    return start


def _year_kind(year: int) -> tuple[bool, int]:
    return calendar.isleap(year), date(year, 1, 1).weekday()


def _phase_kept(shape: Shape, years: int, days: int) -> bool:
    n = shape.interval
    if shape.freq == "YEARLY":
        return years % n == 0
    if shape.freq == "MONTHLY":
        return (12 * years) % n == 0
    if shape.freq == "WEEKLY":
        return days % (7 * n) == 0
    return (days * {"DAILY": 1, **SUB_DAILY}[shape.freq]) % n == 0


def _calendar_shift(shape: Shape, first: datetime, last: datetime) -> timedelta:
    """Days to add so that the walk from `first` past `last` runs on the last years before 9999.

    The years from `first` to `last` (and one either side: ISO week numbers look at them) are mapped onto
    years of the same kinds, by a shift that keeps the INTERVAL's phase; dateutil's walk then ends at 9999,
    a bounded number of periods after `last`, even when the rule has no occurrence at all.
    """
    lo, hi = first.year - 1, last.year + 1
    top = LAST_YEAR - hi
    if top <= 0 or lo < 1:
        return timedelta(0)
    kinds = [_year_kind(y) for y in range(lo, hi + 1)]
    base = date(first.year, 1, 1).toordinal()
    # Days looked at in a year when none has an occurrence: the days of every INTERVAL-th period.
    if shape.freq in SUB_DAILY:
        per_year = 366 * min(1.0, SUB_DAILY[shape.freq] / shape.interval)
    else:
        per_year = 366 / shape.interval
    for years in range(top, 0, -1):
        walked = (LAST_YEAR - first.year - years + 1) * per_year
        if walked > MAX_EMPTY_WALK:
            break
        if _year_kind(lo + years) != kinds[0]:
            continue
        days = date(first.year + years, 1, 1).toordinal() - base
        if not _phase_kept(shape, years, days):
            continue
        if all(_year_kind(y + years) == kinds[y - lo] for y in range(lo, hi + 1)):
            return timedelta(days=days)
    raise ExpansionError(
        f"this repeat (FREQ={shape.freq};INTERVAL={shape.interval} with "
        f"{', '.join(p for p in DAY_PARTS if p in shape.parts) or 'days taken from its start'}) is too "
        "irregular to work out its times; use a smaller or rounder INTERVAL"
    )


def _walk(body: str, start: datetime, begin: datetime, budget: Budget) -> Iterator[datetime]:
    """dateutil's walk of the rule, from a start near `begin` and on a shifted calendar if it may skip."""
    shape = shape_of(body)
    first = aligned_start(shape, start, begin)
    horizon, shift = HORIZON, timedelta(0)
    while shape.skips_periods:
        last = min(begin + horizon, datetime(LAST_YEAR - 2, 12, 31))
        try:
            shift = _calendar_shift(shape, first, last)
            break
        except ExpansionError:
            # Years around a century that is not a leap year (2100) recur only every 400 years: an odd
            # INTERVAL may then find no shift for the whole horizon, but one for a shorter one.
            if horizon < MIN_HORIZON:
                raise
            horizon /= 2
    last = min(begin + horizon, datetime(LAST_YEAR - 2, 12, 31))
    try:
        walk = iter(rrulestr(f"RRULE:{body}", dtstart=first + shift))
    except ValueError:  # BYHOUR/BYMINUTE that the INTERVAL never reaches from this start
        return
    while True:
        budget.step()
        try:
            t = next(walk) - shift
        except StopIteration:
            return
        except (ValueError, OverflowError):  # the walk reached the end of datetime's years
            return
        if t > last:
            return
        if t >= begin:
            yield t


def _sub_daily_on_days(shape: Shape, start: datetime, begin: datetime, budget: Budget) -> Iterator[datetime]:
    """An hourly or minutely rule with day-level parts: the days those parts allow, then its times in each.

    dateutil walks such a rule through every skipped day, and steps to the first allowed hour of each
    one minute at a time (a day filtered out costs up to 1440 steps). Without BYSETPOS (refused for these
    frequencies) the rule's times are exactly the times of the rule without its day-level parts that fall
    on an allowed day, so the days are found by a daily walk and the times by a walk of one day each.
    """
    day_parts = [f"{k}={v}" for k, v in shape.parts.items() if k in DAY_PARTS or k == "WKST"]
    time_body = ";".join(
        [f"FREQ={shape.freq}", f"INTERVAL={shape.interval}"]
        + [f"{k}={v}" for k, v in shape.parts.items() if k not in DAY_PARTS]
    )
    time_shape = shape_of(time_body)
    midnight = datetime.combine(max(start, begin).date(), datetime.min.time())
    for day in _walk(";".join(["FREQ=DAILY", *day_parts]), midnight, midnight, budget):
        lo, hi = max(start, begin, day), day + timedelta(days=1)
        try:
            walk = iter(rrulestr(f"RRULE:{time_body}", dtstart=aligned_start(time_shape, start, lo)))
            for t in walk:
                budget.step()
                if t >= hi:
                    break
                if t >= lo:
                    yield t
        except ValueError:  # BYHOUR/BYMINUTE that the INTERVAL never reaches from this start
            return


def wall_times(body: str, start: datetime, begin: datetime, budget: Budget) -> Iterator[datetime]:
    """The naive occurrences of an RRULE started at `start`, from `begin` on, for HORIZON_YEARS at most."""
    shape = check_rule(body)  # also holds a rule stored before these bounds to them
    if shape.freq in SUB_DAILY and shape.skips_periods:
        yield from _sub_daily_on_days(shape, start, begin, budget)
    else:
        yield from _walk(body, start, begin, budget)
