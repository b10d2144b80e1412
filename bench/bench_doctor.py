"""`python -m bot doctor` against the loopback fakes: wall time and CPU of the whole process, per run.

Run from the repository root: `uv run python bench/bench_doctor.py [--runs 5]`. Prints figures; it is not a
test. The fake Bot API, the fake LLM and a fake SearXNG answer on 127.0.0.1; the first run also creates and
migrates the database (as a first doctor does). `--hang-search` makes SearXNG never answer, to see how long
a doctor takes when one probe does not answer; `--toolkit DIR` has it import an installed data toolkit
(e.g. the test suite's, .cache/sandbox-python).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # so `tests` imports from a checkout

from tests.support.fakes.openai_api import FakeLLM
from tests.support.fakes.search import FakeServer, hang, reply_json, searxng_payload, searxng_result
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, TOKEN
from tests.support.processes import bot_env


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def _doctor(home: Path, env: dict[str, str]) -> tuple[float, float, int, str]:
    """One doctor process: wall seconds, CPU seconds, exit code, output."""
    cpu = _children_cpu()
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bot",
        "doctor",
        cwd=home,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    wall = time.monotonic() - started
    assert proc.returncode is not None
    return wall, _children_cpu() - cpu, proc.returncode, out.decode()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--hang-search", action="store_true", help="SearXNG accepts and never answers")
    parser.add_argument(
        "--toolkit", default="", help="CODE_PYTHON_ENV of an installed toolkit, which the doctor imports"
    )
    args = parser.parse_args()
    searx = FakeServer()
    await searx.start()
    if args.hang_search:
        searx.on("GET", "/search", hang(searx))
    else:
        searx.on("GET", "/search", reply_json(searxng_payload([searxng_result("https://example.com/", "x")])))
    try:
        async with FakeTelegram(token=TOKEN) as tg, FakeLLM() as llm:
            with tempfile.TemporaryDirectory(prefix="bench-doctor-", dir=Path.cwd()) as tmp:
                home = Path(tmp)
                env = bot_env(
                    home,
                    TELEGRAM_BOT_TOKEN=TOKEN,
                    TELEGRAM_API_BASE_URL=tg.base_url,
                    ALLOWED_USER_IDS=str(OWNER),
                    OPENAI_API_KEY="sk-bench",
                    OPENAI_BASE_URL=llm.base_url,
                    LLM_MODEL="fake-model",
                    SEARCH_PROVIDER="searxng",
                    SEARXNG_URL=searx.base_url,
                    DATABASE_URL=f"sqlite:///{home / 'data' / 'assistant.db'}",
                    CODE_PYTHON_ENV=str(Path(args.toolkit).resolve()) if args.toolkit else "",
                )
                walls, cpus = [], []
                for n in range(1, args.runs + 1):
                    wall, cpu, code, out = await _doctor(home, env)
                    walls.append(wall)
                    cpus.append(cpu)
                    note = " (creates and migrates the database)" if n == 1 else ""
                    print(f"run {n}: {wall:5.2f} s wall, {cpu:5.2f} s CPU, exit {code}{note}")
                    if n == 1:
                        print("  " + "\n  ".join(out.strip().splitlines()))
                later = walls[1:] or walls
                print(
                    f"doctor: median {statistics.median(later):.2f} s wall, "
                    f"{statistics.median(cpus[1:] or cpus):.2f} s CPU (runs 2..{args.runs}); "
                    f"first run {walls[0]:.2f} s"
                )
    finally:
        await searx.close()


if __name__ == "__main__":
    asyncio.run(main())
