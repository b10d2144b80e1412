"""Backup benchmark (issue 24): other users' turns while a backup runs, and encryption against copying.

    uv run python bench/bench_backup.py                       # the issue's sizes: 1 GB database, 2 GB media
    uv run python bench/bench_backup.py --scale 0.05          # a quick run at 5% of them

1. Turns while a backup runs. The real bot (tests/support/harness.py: PTB, the agent, SQLite) against the
   loopback fakes of tests/support/fakes, on a SQLite database of `--db-mb` and a MEDIA_DIR of `--media-mb`. A
   user's turns are timed one after another (message pushed -> final answer sent) with the bot idle, then
   while the bot's own backup job (bot/runtime/backup_jobs.py: the worker process at low CPU and I/O priority,
   encrypted for an age key) backs up that database and media. Target: p95 during the backup at most 2x the
   idle p95.
2. Encryption against copying the same bytes: a backup of the same database and media taken plain, then
   encrypted (best of `--repeat`), and the archive stream alone (the plain parts read and written as parts
   again, copied or encrypted). Target: encrypted at most 1.5x plain.

Everything lives in a temporary folder under `--dir` (default: the system's), removed at the end. It prints
figures; it is not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from telegram import Bot

from bot.adapter.outbox import TelegramOutbox
from bot.runtime.backup_jobs import BackupJobs
from core_tools.backup.crypto import encrypt_stream, new_identity
from core_tools.backup.parts import PartReader, PartWriter
from core_tools.backup.take import BackupConfig, take_backup
from db.migrate import upgrade
from tests.support.fakes.openai_api import FakeLLM, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, TOKEN, running_bot

TURN_TARGET = 2.0
CRYPTO_TARGET = 1.5
ROW_BYTES = 1000
MEDIA_FILE_BYTES = 8 * 1024 * 1024


def pct(values: list[float], p: float) -> float:
    """The p-th percentile (nearest rank below, interpolated)."""
    ordered = sorted(values)
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def build(folder: Path, db_mb: float, media_mb: float) -> tuple[str, Path]:
    """A migrated SQLite database of about `db_mb` MB of messages, and `media_mb` MB of media files."""
    db = folder / "data" / "assistant.db"
    url = f"sqlite:///{db}"
    upgrade(url)
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("INSERT INTO users (id, created_at, last_seen_at) VALUES (1, '2026-01-01', '2026-01-01')")
    conn.execute(
        "INSERT INTO sessions (id, user_id, chat_id, chat_type, name, started_at, last_activity_at) "
        "VALUES ('bulk', 1, 1, 'private', 'bulk', '2026-01-01', '2026-01-01')"
    )
    rows = int(db_mb * 1024 * 1024 / (ROW_BYTES + 100))
    pad = os.urandom(ROW_BYTES // 2).hex()
    batch = 10_000
    for start in range(0, rows, batch):
        conn.executemany(
            "INSERT INTO messages (session_id, user_id, chat_id, role, content, status, created_at) "
            "VALUES ('bulk', 1, 1, 'user', ?, 'answered', '2026-01-01')",
            [(f"{n} {pad}",) for n in range(start, min(rows, start + batch))],
        )
        conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    media = folder / "data" / "media"
    left = int(media_mb * 1024 * 1024)
    n = 0
    while left > 0:
        size = min(MEDIA_FILE_BYTES, left)
        name = f"{n:062x}"[:62] + "ff"  # not a SHA-256 of its bytes: the drill is not run here
        (media / name[:2]).mkdir(parents=True, exist_ok=True)
        (media / name[:2] / name).write_bytes(os.urandom(size))
        left -= size
        n += 1
    return url, media


GAP_S = 0.2  # between one turn's answer and the next message: users type; the bot is not hammered
MOST_TURNS = 150  # a harness bot stalls past 256 turns (its Bot API connection pool runs dry): stay below


async def time_turns(
    h: object, tg: FakeTelegram, llm: FakeLLM, first: int, stop: asyncio.Event | None, least: int
) -> list[float]:
    """Turns one after another (GAP_S apart): at least `least`, and on until `stop` is set (at most
    MOST_TURNS); their times in seconds."""
    times: list[float] = []
    i = first
    while len(times) < least or (stop is not None and not stop.is_set() and len(times) < MOST_TURNS):
        await asyncio.sleep(GAP_S)
        marker = f"[r{i}] done."
        llm.script(text(f"Here you are {marker}"))
        start = time.perf_counter()
        tg.push_text(OWNER, f"question {i}")
        await h.final_text(OWNER, marker)  # type: ignore[attr-defined]
        times.append(time.perf_counter() - start)
        i += 1
    return times


async def turns_during_backup(
    folder: Path, url: str, media: Path, turns: int
) -> tuple[list[float], list[float], float]:
    """Idle turns, then turns while the bot's backup job runs; (idle, during, the backup's seconds)."""
    _, public = new_identity()
    async with (
        FakeTelegram(token=TOKEN) as tg,
        FakeLLM() as llm,
        running_bot(
            folder / "run",
            tg,
            llm,
            database_url=url,
            media_dir=str(media),
            backup_dir=str(folder / "backups-turns"),
            backup_age_recipients=public,
            backup_drill=False,
            memory_extract=False,
        ) as h,
    ):
        await time_turns(h, tg, llm, 0, None, 5)  # warm up
        idle = await time_turns(h, tg, llm, 100, None, turns)
        stop = asyncio.Event()
        async with Bot(TOKEN, base_url=tg.base_url) as bot:
            jobs = BackupJobs(h.services, TelegramOutbox(bot, h.services.conversations.topics))
            start = time.perf_counter()
            backup = asyncio.create_task(jobs.run())
            backup.add_done_callback(lambda _: stop.set())
            during = await time_turns(h, tg, llm, 1000, stop, turns)
            path = await backup
            took = time.perf_counter() - start
        if path is None:
            raise SystemExit("the backup failed: " + " | ".join(tg.sent_texts(OWNER)[-1:]))
    return idle, during, took


def crypto(folder: Path, url: str, media: Path, repeat: int) -> None:
    """Plain against encrypted, the whole backup and the archive stream alone."""
    _, public = new_identity()
    plain_s, enc_s = [], []
    plain_dir = folder / "plain"
    for _ in range(repeat):
        for recipients, out in (([], plain_s), ([public], enc_s)):
            target = folder / ("backups-enc" if recipients else "backups-plain")
            shutil.rmtree(target, ignore_errors=True)
            start = time.perf_counter()
            path, manifest = take_backup(BackupConfig(url, str(media), str(target), recipients=recipients))
            out.append(time.perf_counter() - start)
            if not recipients:
                shutil.rmtree(plain_dir, ignore_errors=True)
                shutil.copytree(path.parent, plain_dir)
                size = manifest.size
    paths = sorted(p for p in plain_dir.iterdir() if ".tar." in p.name)
    copy_s, stream_s = [], []
    for _ in range(repeat):
        for encrypt, out in ((False, copy_s), (True, stream_s)):
            dest = folder / "stream"
            shutil.rmtree(dest, ignore_errors=True)
            dest.mkdir()
            start = time.perf_counter()
            reader, writer = PartReader(paths), PartWriter(dest, "s", 45 * 1024 * 1024)
            if encrypt:

                def produce(out: IO[bytes], source: PartReader = reader) -> None:
                    shutil.copyfileobj(source, out, 1 << 20)  # type: ignore[misc]

                encrypt_stream(produce, writer, [public])
            else:
                shutil.copyfileobj(reader, writer, 1 << 20)  # type: ignore[misc]
            writer.close()
            out.append(time.perf_counter() - start)
    b, e, c, s = min(plain_s), min(enc_s), min(copy_s), min(stream_s)
    print(f"\nencryption against copying the same bytes ({size / 1e9:.2f} GB archive, best of {repeat}):")
    print(
        f"  whole backup:   plain {b:6.1f} s ({size / b / 1e6:6.0f} MB/s)   "
        f"encrypted {e:6.1f} s   ratio {e / b:4.2f}x"
    )
    print(
        f"  archive stream: copy  {c:6.1f} s ({size / c / 1e6:6.0f} MB/s)   "
        f"encrypted {s:6.1f} s   ratio {s / c:4.2f}x"
    )
    verdict = "met" if e / b <= CRYPTO_TARGET else "NOT met"
    print(f"  target: encrypted backup within {CRYPTO_TARGET}x of the plain one: {verdict}")


def main() -> None:
    """Build the data, run both measurements, print the figures."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--db-mb", type=float, default=1024.0, help="database size (default 1024: 1 GB)")
    parser.add_argument("--media-mb", type=float, default=2048.0, help="media size (default 2048: 2 GB)")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="multiply both sizes (e.g. 0.05 for a quick run)"
    )
    parser.add_argument(
        "--turns", type=int, default=40, help="turns timed idle, and at least while backing up"
    )
    parser.add_argument(
        "--repeat", type=int, default=2, help="runs of each encryption measurement (best kept)"
    )
    parser.add_argument(
        "--dir", default=None, help="where the temporary folder goes (needs about 6x the data)"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    folder = Path(tempfile.mkdtemp(prefix="bench-backup-", dir=args.dir))
    try:
        db_mb, media_mb = args.db_mb * args.scale, args.media_mb * args.scale
        start = time.perf_counter()
        url, media = build(folder, db_mb, media_mb)
        size = (folder / "data" / "assistant.db").stat().st_size
        print(
            f"data: database {size / 1e9:.2f} GB, media {media_mb * 1024 * 1024 / 1e9:.2f} GB "
            f"(built in {time.perf_counter() - start:.0f} s); {os.cpu_count()} cores"
        )
        idle, during, took = asyncio.run(turns_during_backup(folder, url, media, args.turns))
        print(
            f"\nturns of another user (push -> final answer), {len(idle)} idle, {len(during)} during a "
            f"{took:.0f} s encrypted backup:"
        )
        for name, values in (("idle", idle), ("during backup", during)):
            print(
                f"  {name:14s} p50 {statistics.median(values) * 1000:7.1f} ms   "
                f"p95 {pct(values, 95) * 1000:7.1f} ms"
                f"   max {max(values) * 1000:7.1f} ms"
            )
        ratio = pct(during, 95) / pct(idle, 95)
        print(
            f"  p95 ratio {ratio:.2f}x: target at most {TURN_TARGET}x: "
            + ("met" if ratio <= TURN_TARGET else "NOT met")
        )
        shutil.rmtree(folder / "backups-turns", ignore_errors=True)
        crypto(folder, url, media, args.repeat)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
