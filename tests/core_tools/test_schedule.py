"""Scheduling logic with an injected clock over a real migrated database: times, DST, limits, firings."""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from dateutil.rrule import rrulestr
from sqlalchemy import Engine

from core_tools.registry import ToolRegistry
from core_tools.schedule.expand import HORIZON, Budget, wall_times
from core_tools.schedule.rules import ScheduleInputError, Spec, localize, occurrences_after, parse_repeat
from core_tools.schedule.service import ScheduleService
from core_tools.schedule.tool import ScheduleTool
from core_tools.schedule.validate import Limits
from core_tools.types import ToolCallRequest, ToolContext
from db.conversations import Conversations
from db.engine import make_sessionmaker
from db.schedules import Schedules
from tests.support.databases import both_databases

db_kind = both_databases()  # SQLite and PostgreSQL: claiming firings differs by dialect (db/schedules.py)

BERLIN = ZoneInfo("Europe/Berlin")
ANN, BOB = 111, 222


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **kw: float) -> None:
        self.now += timedelta(**kw)


@pytest.fixture
def clock() -> Clock:
    return Clock(datetime(2026, 3, 27, 10, 0, tzinfo=UTC))  # Friday; Berlin goes to summer time on Sunday


@pytest.fixture
def conv(engine: Engine) -> Conversations:
    c = Conversations(make_sessionmaker(engine), engine)
    for uid in (ANN, BOB):
        c.ensure_user(uid, "x")
    c.set_user_timezone(ANN, "Europe/Berlin")
    c.set_user_timezone(BOB, "Europe/Berlin")
    return c


@pytest.fixture
def svc(engine: Engine, conv: Conversations, clock: Clock) -> ScheduleService:
    return ScheduleService(
        Schedules(make_sessionmaker(engine)), conv.user_timezone, limits=Limits(max_active=3), clock=clock
    )


def create(svc: ScheduleService, user: int = ANN, **kw: object) -> dict[str, object]:
    args: dict[str, object] = {"user_id": user, "chat_id": user, "chat_type": "private", "text": "call"}
    args.update(kw)
    return svc.create(**args)  # type: ignore[arg-type]


def test_daily_nine_stays_nine_local_across_the_dst_change(svc: ScheduleService, clock: Clock) -> None:
    made = create(svc, at="2026-03-28T09:00", repeat="FREQ=DAILY")
    assert made["next"] == ["Sat 28 Mar 2026 09:00", "Sun 29 Mar 2026 09:00", "Mon 30 Mar 2026 09:00"]
    assert "every day at 09:00 (Europe/Berlin)" in str(made["description"])
    fired: list[datetime] = []
    for _ in range(3):
        nxt = svc.store.next_schedule_time()
        assert nxt is not None
        clock.now = nxt
        assert len(svc.fire_due()) == 1
        fired.append(nxt)
    # 08:00 UTC in winter time, 07:00 UTC in summer time: 09:00 on the wall clock each day.
    assert [t.astimezone(BERLIN).hour for t in fired] == [9, 9, 9]
    assert [t.hour for t in fired] == [8, 7, 7]


def test_a_time_skipped_by_the_dst_change_fires_at_the_next_valid_minute() -> None:
    rep, _, _ = parse_repeat("30 2 * * *", BERLIN)
    spec = Spec(datetime(2026, 3, 28, 2, 30), rep)
    times = occurrences_after(spec, BERLIN, datetime(2026, 3, 28, tzinfo=UTC), 3)
    assert [t.astimezone(BERLIN).strftime("%d %H:%M") for t in times] == ["28 02:30", "29 03:00", "30 02:30"]
    # The doubled hour in autumn fires once.
    rep, _, _ = parse_repeat("FREQ=DAILY", BERLIN)
    spec = Spec(datetime(2026, 10, 24, 2, 30), rep)
    times = occurrences_after(spec, BERLIN, datetime(2026, 10, 24, tzinfo=UTC), 3)
    assert [t.astimezone(BERLIN).strftime("%d %H:%M") for t in times] == ["24 02:30", "25 02:30", "26 02:30"]
    assert localize(datetime(2026, 3, 29, 2, 15), BERLIN) == datetime(2026, 3, 29, 1, 0, tzinfo=UTC)


def test_weekly_rrule_and_cron_give_their_next_three_times(svc: ScheduleService) -> None:
    made = create(svc, at="2026-03-30T08:00", repeat="FREQ=WEEKLY;BYDAY=MO,WE,FR")
    assert made["next"] == ["Mon 30 Mar 2026 08:00", "Wed 01 Apr 2026 08:00", "Fri 03 Apr 2026 08:00"]
    cron = create(svc, at=None, repeat="0 8 * * 1-5", kind="message")
    assert cron["next"] == ["Mon 30 Mar 2026 08:00", "Tue 31 Mar 2026 08:00", "Wed 01 Apr 2026 08:00"]
    assert "08:00" in str(cron["description"])


def test_count_and_until_end_a_series(svc: ScheduleService, clock: Clock) -> None:
    made = create(svc, at="2026-03-28T09:00", repeat="FREQ=DAILY", count=2)
    assert len(made["next"]) == 2  # type: ignore[arg-type]
    until = create(svc, at="2026-03-28T10:00", repeat="FREQ=DAILY;UNTIL=20260329")
    assert len(until["next"]) == 2  # type: ignore[arg-type]
    clock.now = datetime(2026, 4, 5, tzinfo=UTC)
    svc.fire_due()
    assert svc.store.count_by_status() == {"done": 2}


def test_bad_input_is_a_clear_error_and_stores_nothing(svc: ScheduleService) -> None:
    cases: list[tuple[dict[str, object], str]] = [
        ({"at": "2026-03-27T10:00"}, "in the past"),  # 10:00 Berlin is 09:00 UTC, before now
        ({"at": "tomorrow at 9"}, "not an ISO 8601"),
        ({"at": "2026-03-28T09:00", "repeat": "FREQ=DAILY;BYDAY=XX"}, "does not parse"),
        ({"at": "2026-03-28T09:00", "repeat": "61 * * * *"}, "does not parse"),
        ({"at": "2026-03-28T09:00", "repeat": "every day"}, "neither an iCalendar RRULE"),
        ({"at": "2026-03-28T09:00", "repeat": "*/10 * * * *", "kind": "task"}, "at most every 15 min"),
        ({"at": "2026-03-28T09:00", "repeat": "FREQ=SECONDLY;INTERVAL=30"}, "FREQ=SECONDLY is not supported"),
        ({"at": "2026-03-28T09:00", "repeat": "FREQ=MINUTELY;BYSECOND=0,30"}, "at most every 1 min"),
        ({"at": "2026-03-28T09:00", "text": " "}, "text is empty"),
    ]
    for kw, message in cases:
        with pytest.raises(ScheduleInputError, match=message):
            create(svc, **kw)
    assert svc.store.count_by_status() == {}


def test_the_active_limit_and_other_users_ids(svc: ScheduleService) -> None:
    ids = [create(svc, at=f"2026-03-28T09:0{i}")["id"] for i in range(3)]
    with pytest.raises(ScheduleInputError, match="already has 3 active schedules"):
        create(svc, at="2026-03-28T10:00")
    with pytest.raises(ScheduleInputError, match="no schedule with id"):
        svc.cancel(BOB, int(ids[0]))  # type: ignore[call-overload]
    with pytest.raises(ScheduleInputError, match="no schedule with id"):
        svc.cancel(ANN, 9999)
    assert svc.list_for(BOB) == []
    svc.cancel(ANN, int(ids[0]))  # type: ignore[call-overload]
    assert len(svc.list_for(ANN)) == 2
    create(svc, at="2026-03-28T10:00")  # room again


def test_downtime_fires_a_repeating_schedule_once_and_a_one_shot_late(
    svc: ScheduleService, clock: Clock
) -> None:
    create(svc, at="2026-03-28T09:00", repeat="FREQ=HOURLY")
    create(svc, at="2026-03-28T09:30", text="one")
    clock.now = datetime(2026, 3, 28, 20, 10, tzinfo=UTC)  # down for ~12 hours
    svc.fire_due()
    firings = svc.due_firings(10)
    assert len(firings) == 2
    hourly = next(f for f in firings if f.repeating)
    assert hourly.missed == 13 - 1  # 09:00 .. 21:00 local, folded into one
    assert next(f for f in firings if not f.repeating).due_at == datetime(2026, 3, 28, 8, 30, tzinfo=UTC)
    rows = svc.list_for(ANN)
    assert [r["next"] for r in rows if r["next"]] == [
        ["Sat 28 Mar 2026 22:00", "Sat 28 Mar 2026 23:00", "Sun 29 Mar 2026 00:00"]
    ]


def test_a_timezone_change_moves_local_schedules_but_not_pinned_ones(
    svc: ScheduleService, conv: Conversations
) -> None:
    local = create(svc, at="2026-03-28T09:00", repeat="FREQ=DAILY")
    pinned = create(svc, at="2026-03-28T09:00+01:00")
    conv.set_user_timezone(ANN, "America/New_York")
    assert svc.reconcile_zones() == 1
    views = {v["id"]: v for v in svc.list_for(ANN)}
    assert views[local["id"]]["next"][0] == "Sat 28 Mar 2026 09:00"
    assert views[local["id"]]["timezone"] == "America/New_York"
    assert views[pinned["id"]]["timezone"] == "Europe/Berlin"
    row = svc.store.get(int(local["id"]))  # type: ignore[call-overload]
    assert row is not None and row.next_fire_at == datetime(2026, 3, 28, 13, 0, tzinfo=UTC)


def test_firing_states_retry_failures_and_snooze(svc: ScheduleService, clock: Clock) -> None:
    made = create(svc, at="2026-03-27T11:05", kind="task", text="news", repeat="FREQ=DAILY")
    clock.now = datetime(2026, 3, 27, 10, 5, tzinfo=UTC)
    (fid,) = svc.fire_due()
    svc.mark_sending([fid])
    assert svc.store.firing(fid).status == "sending"  # type: ignore[union-attr]
    svc.record([(fid, svc.outcome_retry(1, "timed out"))])
    assert svc.due_firings(10) == []  # waits for its backoff
    clock.advance(seconds=3)
    assert [f.id for f in svc.due_firings(10)] == [fid]
    svc.record([(fid, svc.outcome_sent(42))])
    sent = svc.store.firing(fid)
    assert sent is not None and sent.status == "sent" and sent.message_id == 42
    # Three failed runs in a row pause a task.
    sid = int(made["id"])  # type: ignore[call-overload]
    assert [svc.task_failed(sid) for _ in range(3)] == [False, False, True]
    assert svc.store.get(sid).status == "paused"  # type: ignore[union-attr]
    with pytest.raises(ScheduleInputError, match="not yours"):
        svc.snooze(BOB, fid, 10)
    when = svc.snooze(ANN, fid, 10)
    assert when == clock.now + timedelta(minutes=10)
    with pytest.raises(ScheduleInputError, match="already snoozed"):
        svc.snooze(ANN, fid, 10)


async def test_the_tool_returns_errors_to_the_model_and_ids_on_success(svc: ScheduleService) -> None:
    registry = ToolRegistry()
    registry.register(ScheduleTool(svc).schedule)
    ctx = ToolContext(user_id=ANN, chat_id=ANN, session_id="s")
    args = {"action": "create", "text": "dentist", "at": "2026-03-28T09:00"}
    ok = await registry.call(ToolCallRequest("1", "schedule", json.dumps(args)), ctx)
    body = json.loads(ok.content)
    assert ok.ok and body["id"] and body["next"] == ["Sat 28 Mar 2026 09:00"]
    bad = await registry.call(
        ToolCallRequest("2", "schedule", json.dumps({**args, "at": "2020-01-01T09:00"})), ctx
    )
    assert not bad.ok and "in the past" in (bad.error or "")
    group = ToolContext(user_id=ANN, chat_id=-100, session_id="s", chat_type="group")
    listed = await registry.call(ToolCallRequest("3", "schedule", '{"action": "list"}'), group)
    assert json.loads(listed.content)["count"] == 0  # the private reminder is not shown in a group
    other = ToolContext(user_id=BOB, chat_id=BOB, session_id="s")
    cancel = json.dumps({"action": "cancel", "id": body["id"]})
    refused = await registry.call(ToolCallRequest("4", "schedule", cancel), other)
    assert not refused.ok and "no schedule with id" in (refused.error or "")


def test_a_frequent_repeat_missed_for_a_month_fires_once_and_starts_afresh(
    svc: ScheduleService, clock: Clock
) -> None:
    made = create(svc, at="2026-03-27T11:01", repeat="FREQ=MINUTELY;INTERVAL=2")
    clock.now = datetime(2026, 4, 27, 10, 0, 30, tzinfo=UTC)  # a month later
    (fid,) = svc.fire_due()
    firing = svc.store.firing(fid)
    # Every 2 minutes for 31 days (22,320), plus 03:00 on 29 March: the skipped hour's times move there.
    assert firing is not None and firing.missed == 22_320
    row = svc.store.get(int(made["id"]))  # type: ignore[call-overload]
    assert row is not None and row.next_fire_at == datetime(2026, 4, 27, 10, 1, tzinfo=UTC)
    # The rule now iterates from its next occurrence, not from a month ago; the phase is kept.
    assert row.start_local == "2026-04-27T12:01:00"
    assert svc.list_for(ANN)[0]["next"] == [
        "Mon 27 Apr 2026 12:01",
        "Mon 27 Apr 2026 12:03",
        "Mon 27 Apr 2026 12:05",
    ]


def test_update_changes_time_text_and_repeat(svc: ScheduleService, clock: Clock) -> None:
    made = create(svc, at="2026-03-28T09:00")
    sid = int(made["id"])  # type: ignore[call-overload]
    moved = svc.update(ANN, sid, at="2026-03-28T18:30", text="call mum")
    assert moved["next"] == ["Sat 28 Mar 2026 18:30"] and moved["text"] == "call mum"
    weekly = svc.update(ANN, sid, repeat="FREQ=WEEKLY")
    assert weekly["next"][:2] == ["Sat 28 Mar 2026 18:30", "Sat 04 Apr 2026 18:30"]
    once = svc.update(ANN, sid, repeat="none")
    assert once["next"] == ["Sat 28 Mar 2026 18:30"] and "repeat" not in once
    with pytest.raises(ScheduleInputError, match="in the past"):
        svc.update(ANN, sid, at="2026-03-01T09:00")
    with pytest.raises(ScheduleInputError, match="no schedule with id"):
        svc.update(BOB, sid, text="mine now")
    assert svc.list_for(ANN)[0]["text"] == "call mum"


def test_a_start_long_past_is_moved_forward_by_whole_repeats(svc: ScheduleService, clock: Clock) -> None:
    # Minutely since the year 1000 (it never returned): worked out from now, the start moved forward.
    made = create(svc, at="1000-01-01T00:00", repeat="FREQ=MINUTELY;INTERVAL=7")
    # It is 11:00 in Berlin, 5 minutes past a multiple of 7 minutes since 1 January 1000 (proleptic).
    assert made["next"] == ["Fri 27 Mar 2026 11:02", "Fri 27 Mar 2026 11:09", "Fri 27 Mar 2026 11:16"]
    row = svc.store.get(int(made["id"]))  # type: ignore[call-overload]
    assert row is not None and row.start_local.startswith("2026-03-27T")
    # A birthday given with the year of birth keeps its day; a 29 February one comes in leap years.
    birthday = create(svc, at="1904-02-29T09:00", repeat="FREQ=YEARLY")
    assert birthday["next"] == ["Tue 29 Feb 2028 09:00", "Sun 29 Feb 2032 09:00", "Fri 29 Feb 2036 09:00"]
    fortnightly = create(svc, at="1990-01-01T08:00", repeat="FREQ=WEEKLY;INTERVAL=2;BYDAY=MO")
    # 1 January 1990 was a Monday; Monday 30 March 2026 is 1891 weeks later (odd): the phase is kept.
    assert fortnightly["next"] == ["Mon 06 Apr 2026 08:00", "Mon 20 Apr 2026 08:00", "Mon 04 May 2026 08:00"]


def test_rules_that_never_happen_or_cost_too_much_are_refused_at_once(svc: ScheduleService) -> None:
    cases = [
        ("FREQ=MINUTELY;BYMONTH=2;BYMONTHDAY=30", "never happens"),
        ("FREQ=YEARLY;BYMONTH=4;BYMONTHDAY=31", "never happens"),
        ("FREQ=MONTHLY;BYDAY=MO;BYSETPOS=6", "never happens"),
        ("FREQ=DAILY;INTERVAL=7;BYDAY=TU", "never happens"),  # from a Monday: only Mondays are visited
        ("FREQ=YEARLY;INTERVAL=4;BYMONTH=2;BYMONTHDAY=29", "never happens"),  # from 2029: no leap year
        ("FREQ=MINUTELY;BYHOUR=23;BYDAY=MO;BYMONTH=2;BYMONTHDAY=30", "never happens"),
        ("FREQ=SECONDLY;BYSECOND=0", "FREQ=SECONDLY is not supported"),
        ("FREQ=YEARLY;BYHOUR=0,1,2,3,4,5,6,7,8,9,10,11;BYMINUTE=0,10,20,30,40,50", "at most 20000"),
        ("FREQ=MINUTELY;BYSETPOS=2", "BYSETPOS is not supported"),
        ("FREQ=DAILY;INTERVAL=100000", "too large"),
    ]
    for repeat, message in cases:
        with pytest.raises(ScheduleInputError, match=message):
            create(
                svc, at="2029-01-01T09:00" if "INTERVAL=4" in repeat else "2026-03-30T09:00", repeat=repeat
            )
    assert svc.store.count_by_status() == {}


RULES = [
    "FREQ=DAILY",
    "FREQ=WEEKLY;INTERVAL=2;BYDAY=MO,TH",
    "FREQ=WEEKLY;WKST=SU;INTERVAL=3;BYDAY=SU,SA",
    "FREQ=MONTHLY;BYDAY=-1FR",
    "FREQ=MONTHLY;BYMONTHDAY=31",
    "FREQ=MONTHLY;BYDAY=FR;BYMONTHDAY=13",
    "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1",
    "FREQ=MONTHLY;INTERVAL=5;BYDAY=2WE",
    "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29",
    "FREQ=YEARLY;BYWEEKNO=53;BYDAY=MO",
    "FREQ=YEARLY;BYYEARDAY=-1,100;BYHOUR=7,19",
    "FREQ=YEARLY;INTERVAL=4;BYMONTH=2;BYMONTHDAY=29",
    "FREQ=DAILY;INTERVAL=3;BYMONTHDAY=1,15",
    "FREQ=HOURLY;INTERVAL=5;BYDAY=MO",
    "FREQ=HOURLY;INTERVAL=7;BYDAY=MO;BYMINUTE=5,35",
    "FREQ=MINUTELY;INTERVAL=45;BYDAY=SA,SU;BYHOUR=9,10",
    "FREQ=MINUTELY;INTERVAL=7;BYHOUR=9,17;BYDAY=MO,FR",
    "FREQ=MINUTELY;INTERVAL=90;BYMONTHDAY=1,-1",
    "FREQ=MINUTELY;BYMONTH=2;BYMONTHDAY=29;BYHOUR=3",
]


@pytest.mark.parametrize("body", RULES)
def test_bounded_expansion_gives_the_times_dateutil_gives(body: str) -> None:
    # The walk on a moved start and a shifted calendar must not change a single time.
    for start, begin in [
        (datetime(2024, 2, 29, 9, 30), datetime(2026, 11, 26, 10, 0)),
        (datetime(2019, 1, 31, 23, 15), datetime(2031, 6, 1)),
        (datetime(2075, 12, 27, 0, 0), datetime(2078, 3, 1)),  # its horizon holds 2100, not a leap year
    ]:
        want = []
        for t in rrulestr(f"RRULE:{body}", dtstart=start):
            if t > begin + HORIZON or len(want) == 6:
                break
            if t >= begin:
                want.append(t)
        assert list(itertools.islice(wall_times(body, start, begin, Budget()), 6)) == want, (start, begin)
