"""Benchmark of the code sandbox: `uv run python bench/bench_sandbox.py [--runs 30] [--concurrent 20]`.

Prints the round trip of `print(1)` through LocalExecutor next to a bare interpreter subprocess measured
in the same run, and checks that concurrent executions do not see each other's output or files.
Then the memory a run that forks six 200 MB children holds on the host, under each memory bound (the run's
own cgroup and the watchdog): the executor runs in a child process inside a measuring cgroup whose peak
the kernel records (tests/support/measuring_cgroup.py; needs a writable cgroup v1 memory hierarchy; target:
CODE_MEMORY_MB + a few MB).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core_tools.sandbox import LocalExecutor, SandboxLimits, describe
from core_tools.sandbox.isolation import find_interpreters
from tests.support.measuring_cgroup import FORKS, measured_run, own_memory_cgroup


def _stats(samples: list[float]) -> tuple[float, float]:
    """Median and p95 in milliseconds."""
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p95 * 1000


async def _time(runs: int, call: Callable[[], Awaitable[None]]) -> list[float]:
    """Wall time of `runs` sequential calls (after one warm-up)."""
    await call()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return samples


def _held_by_forking_run(use_cgroups: bool) -> str:
    """One line: the peak memory the host gave a run of FORKS, measured by the kernel."""
    if own_memory_cgroup() is None:
        return "not measured: no writable cgroup v1 memory hierarchy here"
    report = measured_run(FORKS, cgroups=use_cgroups, prefix="bench-measure")
    result = report["result"]
    held_mb = report["held"] / (1024 * 1024)
    return (
        f"{held_mb:6.1f} MB held on the host (limit {report['limit_mb']} MB, 6 x 200 MB wanted), "
        f"run ended: {result['error_category']}, {result['duration_ms']} ms; bound: {report['bound']}"
    )


async def main() -> None:
    """Run the benchmarks and print the figures."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--concurrent", type=int, default=20)
    args = parser.parse_args()

    executor = LocalExecutor(SandboxLimits())
    print(describe(executor))
    python = find_interpreters()["python"].path

    async def sandboxed(language: str = "python", code: str = "print(1)") -> None:
        result = await executor.run(code, language)
        assert result.success and result.stdout == "1\n", result

    async def bare(*argv: str) -> None:
        # Same minimal environment as the sandbox (e.g. NODE_EXTRA_CA_CERTS alone costs node ~60 ms).
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, env=env)
        out, _ = await proc.communicate()
        assert out == b"1\n"

    rows = [
        ("bare  python3 -c 'print(1)'", await _time(args.runs, lambda: bare(python, "-c", "print(1)"))),
        ("sandbox python print(1)", await _time(args.runs, sandboxed)),
    ]
    if "javascript" in executor.languages():
        node = find_interpreters()["javascript"].path
        rows.append(
            (
                "bare  node -e 'console.log(1)'",
                await _time(args.runs, lambda: bare(node, "-e", "console.log(1)")),
            )
        )
        rows.append(
            (
                "sandbox node console.log(1)",
                await _time(args.runs, lambda: sandboxed("javascript", "console.log(1)")),
            )
        )
    medians = {}
    for label, samples in rows:
        median, p95 = _stats(samples)
        medians[label] = median
        print(f"{label:34s} median {median:7.1f} ms   p95 {p95:7.1f} ms   (n={len(samples)})")
    ratio = medians["sandbox python print(1)"] / medians["bare  python3 -c 'print(1)'"]
    print(f"python ratio sandbox/bare (median): {ratio:.2f}x")
    if "javascript" in executor.languages():
        js_ratio = medians["sandbox node console.log(1)"] / medians["bare  node -e 'console.log(1)'"]
        print(f"node   ratio sandbox/bare (median): {js_ratio:.2f}x")

    code = (
        "import os\n"
        "open('own-{i}.txt', 'w').write('{i}')\n"
        "print('value-{i}', sorted(os.listdir('.')), open('own-{i}.txt').read())"
    )
    started = time.perf_counter()
    results = await asyncio.gather(*(executor.run(code.format(i=i)) for i in range(args.concurrent)))
    elapsed = (time.perf_counter() - started) * 1000
    clean = sum(r.success and r.stdout == f"value-{i} ['own-{i}.txt'] {i}\n" for i, r in enumerate(results))
    print(
        f"{args.concurrent} concurrent runs: {clean}/{args.concurrent} complete with only their own output"
        f" and file, {elapsed:.0f} ms total, slowest {max(r.duration_ms for r in results)} ms"
    )
    if clean != args.concurrent:
        for i, r in enumerate(results):
            print(i, r)
        sys.exit(1)

    print(f"forking run, own cgroup: {_held_by_forking_run(True)}")
    print(f"forking run, watchdog:   {_held_by_forking_run(False)}")


if __name__ == "__main__":
    asyncio.run(main())
