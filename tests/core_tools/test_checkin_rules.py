"""The check-in's pure rules: what /checkin accepts, the first time in a zone (DST included), the back-off
and what the preflight lists."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from core_tools.checkin import rules
from core_tools.checkin.rules import CapFigure, CheckinInputError, Limits, Request, parse
from db.checkins import MidMemory, PreflightInputs, ScheduleItem

NOW = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)


def test_parse_accepts_the_documented_forms_and_refuses_the_rest_with_the_usage_line() -> None:
    assert parse([]) == Request("show")
    assert parse(["off"]) == Request("off")
    assert parse(["daily", "9:05"]) == Request("set", "daily", None, "09:05", False)
    assert parse(["Weekly", "Monday", "18:00", "digest"]) == Request("set", "weekly", 0, "18:00", True)
    assert parse(["weekly", "sun", "07:30"]).weekday == 6
    for bad in (["daily"], ["daily", "24:00"], ["weekly", "mo", "10:00"], ["hourly", "10:00"], ["digest"]):
        with pytest.raises(CheckinInputError, match="Usage: /checkin daily HH:MM"):
            parse(bad)


def test_the_first_time_is_local_and_survives_the_spring_gap() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    # Saturday 28 Mar 2026 13:00 in Berlin; clocks go forward on Sunday at 02:00.
    assert rules.first_time("daily", None, "09:00", berlin, NOW) == datetime(2026, 3, 29, 7, 0, tzinfo=UTC)
    assert rules.first_time("daily", None, "14:00", berlin, NOW) == datetime(2026, 3, 28, 13, 0, tzinfo=UTC)
    sunday_gap = rules.first_time("weekly", 6, "02:30", berlin, NOW)  # 02:30 does not exist that night
    assert sunday_gap > NOW and sunday_gap.date() == datetime(2026, 3, 29).date()
    assert rules.first_time("weekly", 0, "08:00", ZoneInfo("UTC"), NOW).weekday() == 0


def test_two_ignored_back_off_one_level_at_a_time_up_to_weekly() -> None:
    assert rules.after_ignore(0, 0) == (0, 1, False)
    assert rules.after_ignore(0, 1) == (1, 0, True)
    assert rules.after_ignore(1, 1) == (2, 0, True)
    assert rules.after_ignore(2, 1) == (2, 2, False)  # weekly is the last step
    sent = NOW - timedelta(days=1)
    assert rules.due_by_backoff("daily", 0, sent, NOW)
    assert not rules.due_by_backoff("daily", 1, sent, NOW)
    assert rules.due_by_backoff("daily", 1, NOW - timedelta(days=2), NOW)
    assert not rules.due_by_backoff("daily", 2, NOW - timedelta(days=6), NOW)
    assert (
        rules.backoff_words("daily", 1) == "every other day" and rules.backoff_words("daily", 2) == "weekly"
    )


def _mid(content: str, expires: timedelta | None, updated: timedelta = timedelta(days=1)) -> MidMemory:
    return MidMemory("id-" + content, "goal", content, 0.6, NOW + expires if expires else None, NOW - updated)


def test_the_preflight_lists_only_what_is_due_most_pressing_first() -> None:
    utc = ZoneInfo("UTC")
    assert rules.preflight(PreflightInputs(1), [], NOW, utc) == []
    inputs = PreflightInputs(
        1,
        memories=[
            _mid("quiet plan", timedelta(days=50), updated=timedelta(days=40)),
            _mid("expires soon", timedelta(days=2)),
            _mid("Done 2026-03-01: finished one", timedelta(days=1)),
        ],
        reminders=[
            ScheduleItem(5, "message", "today", "active", None, 0, NOW + timedelta(hours=3), False),
            ScheduleItem(6, "message", "tomorrow", "active", None, 0, NOW + timedelta(hours=13), False),
        ],
        tasks=[ScheduleItem(7, "task", "news", "paused", "failures", 3, None, True)],
        check=(100, 97),
    )
    caps = [CapFigure("daily", "cost", 1.0, 0.85), CapFigure("monthly", "cost", 10.0, 1.0)]
    items = rules.preflight(inputs, caps, NOW, utc, Limits(max_items=10))
    assert [(i["kind"], i["text"]) for i in items] == [
        ("goal", "expires soon"),
        ("goal", "quiet plan"),
        ("reminder", "today"),
        ("task", "news"),
        ("cap", "your daily cost cap"),
        ("memory", "3 of 100 memories were not found by recall at its last check"),
    ]
    assert items[0]["why"] == "expires in 2 days" and items[1]["why"] == "not mentioned for 40 days"
    assert len(rules.preflight(inputs, caps, NOW, utc, Limits(max_items=2))) == 2
