"""Schedules: 10,000 across 1,000 users; start-up, memory, lateness of 500 falling due in one minute.

    uv run python bench/bench_schedule.py                 # 10,000 schedules, 500 due within one minute
    uv run python bench/bench_schedule.py --spread 0      # the 500 all due in the same second
    uv run python bench/bench_schedule.py --schedules 2000 --due 100 --spread 10

Everything runs in this one process: the real bot (PTB Application, job queue, SQLite migrated by Alembic in
a temporary directory) against the loopback fake Bot API of tests/support/fakes. It prints figures; it is
not a test.

- create: the schedules are made through ScheduleService.create (validation, RRULE/cron, next times), as the
  tool makes them; 9,500 are one-shots, daily/weekly RRULEs and weekday crons over the next weeks, in four
  zones; 500 one-shots fall due in one minute (`--spread` seconds) starting shortly after start-up.
- start-up: the schedule work the bot does at start (recover firings cut by a restart, repair, apply zone
  changes, count) on the 10,000 rows, timed alone; then the whole bot start (build services, migrate,
  start PTB, first look at what is due). Memory: the Python heap peak (tracemalloc) of the schedule
  start-up, and the process RSS.
- lateness: for each of the 500, from its due time to the moment the fake Bot API received its sendMessage.
  The fake runs in its own process by default (as Telegram is not in the bot's process; on a small machine
  an in-process fake takes half the CPU); `--fake-in-process` runs it in this one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot.process.wiring import build_services
from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.telegram_api import Call, FakeTelegram
from tests.support.harness import TOKEN, make_settings, running_bot

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


KEY_PREFIX = "⏰ bench due "


def key_of(text: str) -> str | None:
    """The reminder a sent text belongs to ("bench due 17"), or None."""
    return text[2:].split("\n", 1)[0] if text.startswith(KEY_PREFIX) else None


async def timed_start(tmp: Path, tg: Any, llm: FakeLLM) -> contextlib.AbstractAsyncContextManager[Any]:
    """Start the bot and print how long that took."""
    t0 = time.perf_counter()
    cm = running_bot(tmp, tg, llm)
    await cm.__aenter__()
    print(
        f"bot start (migrate, services, PTB, job queue): {time.perf_counter() - t0:.2f} s; "
        f"RSS {rss_mb():.0f} MB"
    )
    return cm


async def run_in_process(
    tmp: Path,
    tg: FakeTelegram,
    llm: FakeLLM,
    due: dict[str, datetime],
    arrivals: dict[str, datetime],
    spread: float,
) -> None:
    """The fake Bot API in this process: it shares the CPU with the bot."""
    mono0, wall0 = time.monotonic(), datetime.now(UTC)
    cm = await timed_start(tmp, tg, llm)
    try:

        def all_sent() -> bool:
            for c in tg.calls_to("sendMessage"):
                key = key_of(str(c.params.get("text", "")))
                if key and c.ok:
                    arrivals.setdefault(key, wall0 + timedelta(seconds=c.time - mono0))
            return len(arrivals) >= len(due)

        await tg.wait_for(all_sent, timeout=spread + 120, what="every due reminder")
    finally:
        await cm.__aexit__(None, None, None)


class LoggingTelegram(FakeTelegram):
    """The fake Bot API, writing when each bench reminder arrived (wall clock) to a file."""

    def __init__(self, log_path: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.log = open(log_path, "a", encoding="utf-8")  # noqa: SIM115

    def _record(self, call: Call) -> None:
        super()._record(call)
        key = key_of(str(call.params.get("text", ""))) if call.method.lower() == "sendmessage" else None
        if key and call.ok:
            arrived = time.time() - (time.monotonic() - call.time)
            self.log.write(f"{arrived}\t{key}\n")
            self.log.flush()


async def serve_fake(port_file: str, log_file: str) -> None:
    """The --serve-fake mode: run the fake Bot API until killed."""
    async with LoggingTelegram(log_file, token=TOKEN) as tg:
        Path(port_file).write_text(str(tg.port))
        await asyncio.Event().wait()


@dataclass
class RemoteFake:
    """What the harness needs of a fake Bot API that runs in another process."""

    base_url: str


async def run_with_fake_process(
    tmp: Path, llm: FakeLLM, due: dict[str, datetime], arrivals: dict[str, datetime], spread: float
) -> None:
    """The fake Bot API in its own process, as Telegram is: the figures are the bot's own."""
    port_file, log_file = tmp / "fake.port", tmp / "fake.log"
    proc = subprocess.Popen([sys.executable, __file__, "--serve-fake", str(port_file), str(log_file)])
    try:
        while not port_file.exists() or not port_file.read_text():
            await asyncio.sleep(0.05)
        remote = RemoteFake(f"http://127.0.0.1:{int(port_file.read_text())}/bot")
        cm = await timed_start(tmp, remote, llm)
        try:
            deadline = time.monotonic() + spread + 120
            while len(arrivals) < len(due) and time.monotonic() < deadline:
                await asyncio.sleep(0.2)  # polling a file; the arrival times come from the fake itself
                if log_file.exists():
                    for line in log_file.read_text().splitlines():
                        stamp, key = line.split("\t")
                        arrivals.setdefault(key, datetime.fromtimestamp(float(stamp), UTC))
        finally:
            await cm.__aexit__(None, None, None)
    finally:
        proc.terminate()
        proc.wait()
    if len(arrivals) < len(due):
        raise SystemExit(f"only {len(arrivals)} of {len(due)} reminders arrived")


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--due", type=int, default=500)
    parser.add_argument("--spread", type=float, default=60.0, help="seconds over which the due ones fall")
    parser.add_argument("--lead", type=float, default=0.0, help="seconds from start-up to the first due one")
    parser.add_argument("--verbose", action="store_true", help="log what the delivery job does")
    parser.add_argument("--fake-in-process", action="store_true", help="run the fake Bot API in this process")
    parser.add_argument("--serve-fake", nargs=2, metavar=("PORT_FILE", "LOG_FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_fake:
        await serve_fake(*args.serve_fake)
        return
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("bot.runtime.schedule_jobs").setLevel(logging.INFO if args.verbose else logging.WARNING)

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
            arrivals: dict[str, datetime] = {}
            if args.fake_in_process:
                await run_in_process(tmp, tg, llm, due_times, arrivals, args.spread)
                where = "the in-process fake Bot API"
            else:
                await run_with_fake_process(tmp, llm, due_times, arrivals, args.spread)
                where = "the fake Bot API in its own process"
            late = [(arrivals[key] - when).total_seconds() for key, when in due_times.items()]
            p50, p95, worst = statistics.median(late), pct(late, 0.95), max(late)
            print(
                f"lateness of {len(late)} reminders due within {args.spread:.0f} s (due -> sendMessage at "
                f"{where}): median {p50:.3f} s, p95 {p95:.3f} s, max {worst:.3f} s  "
                f"[target p95 < {TARGET_P95_S:.0f} s: {'met' if p95 < TARGET_P95_S else 'NOT met'}]"
            )
            print(f"peak RSS of the process: {rss_mb():.0f} MB")


if __name__ == "__main__":
    asyncio.run(main())
