"""Schedules: 10,000 across 1,000 users; start-up, memory, lateness of 500 falling due in one minute.

    uv run python bench/bench_schedule.py                 # 10,000 schedules, 500 due within one minute
    uv run python bench/bench_schedule.py --spread 0      # the 500 all due in the same second
    uv run python bench/bench_schedule.py --schedules 2000 --due 100 --spread 10

Everything runs in this one process: the real bot (PTB Application, job queue, SQLite migrated by Alembic in
a temporary directory) against the loopback fake Bot API of tests/fakes. It prints figures; it is not a test.

- create: the schedules are made through ScheduleService.create (validation, RRULE/cron, next times), as the
  tool makes them; 9,500 are one-shots, daily/weekly RRULEs and weekday crons over the next weeks, in four
  zones; 500 one-shots fall due in one minute (`--spread` seconds) starting shortly after start-up.
- start-up: the schedule work the bot does at start (recover firings cut by a restart, repair, apply zone
  changes, count) on the 10,000 rows, timed alone; then the whole bot start (build services, migrate,
  start PTB, first look at what is due). Memory: the Python heap peak (tracemalloc) of the schedule
  start-up, and the process RSS.
- lateness: for each of the 500, from its due time to the moment the fake Bot API received its sendMessage.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import random
import resource
import statistics
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.wiring import build_services
from tests.fakes.openai_api import FakeLLM
from tests.fakes.telegram_api import FakeTelegram
from tests.harness import TOKEN, make_settings, running_bot

ZONES = ("Europe/Berlin", "America/New_York", "Asia/Tokyo", "UTC")
TARGET_STARTUP_S = 2.0
TARGET_P95_S = 2.0


def rss_mb() -> float:
    """Peak resident set size of this process in MB (Linux reports KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of values, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def populate(
    tmp: Path, llm: FakeLLM, n: int, users: int, due: int, start_at: datetime, spread: float
) -> dict[str, datetime]:
    """Create the schedules through the service; returns the due time of each of the `due` ones by text."""
    settings = make_settings(tmp, None, llm, schedule_max_active=max(50, n // users + due))
    services = build_services(settings)
    svc = services.schedules.service
    rng = random.Random(7)
    for u in range(users):
        uid = 10_000 + u
        services.conversations.ensure_user(uid, f"u{u}")
        services.conversations.set_user_timezone(uid, ZONES[u % len(ZONES)])
    now = datetime.now(UTC)
    started = time.perf_counter()
    for i in range(n - due):
        uid = 10_000 + i % users
        zone = ZONES[(i % users) % len(ZONES)]
        at = (now + timedelta(hours=2 + rng.random() * 24 * 20)).astimezone(ZoneInfo(zone))
        at_text = at.replace(tzinfo=None, microsecond=0).isoformat()
        kind = i % 4
        repeat = {0: None, 1: "FREQ=DAILY", 2: "FREQ=WEEKLY;BYDAY=MO,WE,FR", 3: "30 7 * * 1-5"}[kind]
        svc.create(
            user_id=uid, chat_id=uid, chat_type="private", text=f"bench filler {i}", at=at_text, repeat=repeat
        )
    due_times: dict[str, datetime] = {}
    for j in range(due):
        uid = 10_000 + (j * 7) % users
        when = start_at + timedelta(seconds=rng.random() * spread if spread else 0)
        when = when.replace(microsecond=0) if spread == 0 else when
        text = f"bench due {j}"
        # `at` with an explicit offset: the exact instant, whatever the user's zone.
        svc.create(
            user_id=uid, chat_id=uid, chat_type="private", text=text, at=when.isoformat(timespec="seconds")
        )
        due_times[text] = when.replace(microsecond=0)
    elapsed = time.perf_counter() - started
    print(f"create: {n} schedules for {users} users in {elapsed:.1f} s ({n / elapsed:,.0f} per second)")
    services.engine.dispose()
    return due_times


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--due", type=int, default=500)
    parser.add_argument("--spread", type=float, default=60.0, help="seconds over which the due ones fall")
    parser.add_argument("--lead", type=float, default=0.0, help="seconds from start-up to the first due one")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    with tempfile.TemporaryDirectory() as tmpdir:
        tmp = Path(tmpdir)
        async with FakeLLM() as llm, FakeTelegram(token=TOKEN) as tg:
            creation_budget = 10.0 + args.schedules / 250  # generous: creation is timed and printed
            start_at = datetime.now(UTC) + timedelta(seconds=creation_budget + args.lead)
            due_times = populate(tmp, llm, args.schedules, args.users, args.due, start_at, args.spread)

            # The schedule work of a start, alone, on the full table (heap peak measured around it).
            settings = make_settings(tmp, tg, llm)
            services = build_services(settings)
            svc = services.schedules.service
            tracemalloc.start()
            t0 = time.perf_counter()
            svc.recover()
            svc.repair()
            svc.reconcile_zones()
            counts = svc.store.count_by_status()
            nxt = svc.next_wake()
            startup_s = time.perf_counter() - t0
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            services.engine.dispose()
            print(
                f"start-up (schedules): {startup_s * 1000:.0f} ms for {sum(counts.values())} schedules "
                f"({counts.get('active', 0)} active), next due {nxt:%H:%M:%S}; heap peak "
                f"{peak / 1e6:.1f} MB  [target < {TARGET_STARTUP_S:.0f} s: "
                f"{'met' if startup_s < TARGET_STARTUP_S else 'NOT met'}]"
            )

            wait = (start_at - datetime.now(UTC)).total_seconds() - 8.0
            if wait > 0:
                print(f"waiting {wait:.0f} s until shortly before the first due time...")
                await asyncio.sleep(wait)
            mono0, wall0 = time.monotonic(), datetime.now(UTC)
            t0 = time.perf_counter()
            async with running_bot(tmp, tg, llm):
                bot_start_s = time.perf_counter() - t0
                print(
                    f"bot start (migrate, services, PTB, job queue): {bot_start_s:.2f} s; "
                    f"RSS {rss_mb():.0f} MB"
                )
                sent: dict[str, float] = {}

                def all_sent() -> bool:
                    for c in tg.calls_to("sendMessage"):
                        text = str(c.params.get("text", ""))
                        if text.startswith("⏰ bench due ") and c.ok:
                            key = text[2:].split("\n", 1)[0]
                            sent.setdefault(key, c.time)
                    return len(sent) >= len(due_times)

                await tg.wait_for(all_sent, timeout=args.spread + 120, what="every due reminder")
            late = []
            for key, when in due_times.items():
                arrived = wall0 + timedelta(seconds=sent[key] - mono0)
                late.append((arrived - when).total_seconds())
            p50, p95, worst = statistics.median(late), pct(late, 0.95), max(late)
            print(
                f"lateness of {len(late)} reminders due within {args.spread:.0f} s (due -> sendMessage at "
                f"the fake Bot API): median {p50:.3f} s, p95 {p95:.3f} s, max {worst:.3f} s  "
                f"[target p95 < {TARGET_P95_S:.0f} s: {'met' if p95 < TARGET_P95_S else 'NOT met'}]"
            )
            print(f"peak RSS of the process: {rss_mb():.0f} MB")


if __name__ == "__main__":
    asyncio.run(main())
