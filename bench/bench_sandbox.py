"""Benchmark of the code sandbox: `uv run python bench/bench_sandbox.py [--runs 30] [--concurrent 20]
[--watchdog] [--breakdown]`.

Prints the round trip of `print(1)` through LocalExecutor next to a bare interpreter subprocess, measured in
turns (bare, then each kind of sandboxed run) so that a change of the machine's load hits all alike, with
the ratio against the target of 1.5x and the memory bound in force (the run's own cgroup v1/v2, or the
watchdog with `--watchdog`). Two kinds of sandboxed run: one that takes a sandbox started ahead of it (the
default of the bot and the service: CODE_SANDBOXES_AHEAD, --ahead) and one that starts its own (0, or a
burst beyond what was started ahead). Before each timed call the work a previous one left behind (a
replacement sandbox starting, a run cgroup being removed) is waited for, untimed.

Then checks that concurrent executions do not see each other's output or files, and the memory a run that
forks six 200 MB children holds on the host under each memory bound: the executor runs in a child process
inside a measuring cgroup whose peak the kernel records (tests/support/measuring_cgroup.py; needs a writable
cgroup v1 memory hierarchy; target: CODE_MEMORY_MB + a few MB). `--breakdown` adds where a run that starts its
own sandbox spends its time (each layer timed alone, with plain subprocesses).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core_tools.sandbox import LocalExecutor, SandboxLimits, describe
from core_tools.sandbox.cgroup import REMOVER, RunCgroup
from core_tools.sandbox.isolation import (
    bwrap_argv,
    drop_privileges,
    find_interpreters,
    find_prlimit,
    limit_wrapper,
    probe_bwrap,
)
from tests.support.measuring_cgroup import FORKS, measured_run, own_memory_cgroup

TARGET = 1.5  # sandboxed print(1) against a bare interpreter, medians
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}  # as the sandbox's (NODE_EXTRA_CA_CERTS alone: +60 ms)


def _stats(samples: list[float]) -> tuple[float, float]:
    """Median and p95 in milliseconds."""
    ordered = sorted(samples)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p95 * 1000


async def _bare(*argv: str) -> None:
    """A bare interpreter that prints 1, as an asyncio subprocess (like the executor's)."""
    proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.PIPE, env=ENV)
    out, _ = await proc.communicate()
    assert out == b"1\n", out


async def _in_turns(
    runs: int, calls: dict[str, Callable[[], Awaitable[None]]], settle: Callable[[], Awaitable[None]]
) -> dict[str, list[float]]:
    """Each call timed `runs` times, in turns, after one untimed warm-up each; `settle` before every one."""
    samples: dict[str, list[float]] = {label: [] for label in calls}
    for call in calls.values():
        await settle()
        await call()
    for _ in range(runs):
        for label, call in calls.items():
            await settle()
            started = time.perf_counter()
            await call()
            samples[label].append(time.perf_counter() - started)
    return samples


def _print_rows(samples: dict[str, list[float]]) -> dict[str, float]:
    """One line per kind of call; the medians by label."""
    medians = {}
    for label, values in samples.items():
        median, p95 = _stats(values)
        medians[label] = median
        print(f"{label:46s} median {median:7.1f} ms   p95 {p95:7.1f} ms   (n={len(values)})")
    return medians


def _ratio_line(language: str, sandboxed: float, bare: float, what: str) -> str:
    """The ratio of two medians against the target."""
    ratio = sandboxed / bare
    verdict = "met" if ratio <= TARGET else "NOT met"
    return f"{language:6s} {what}: {ratio:.2f}x the bare interpreter (target <= {TARGET}x: {verdict})"


def _held_by_forking_run(use_cgroups: bool, ahead: int) -> str:
    """One line: the peak memory the host gave a run of FORKS, measured by the kernel."""
    if own_memory_cgroup() is None:
        return "not measured: no writable cgroup v1 memory hierarchy here"
    report = measured_run(FORKS, cgroups=use_cgroups, prefix="bench-measure", ahead=ahead)
    result = report["result"]
    held_mb = report["held"] / (1024 * 1024)
    return (
        f"{held_mb:6.1f} MB held on the host (limit {report['limit_mb']} MB, 6 x 200 MB wanted), "
        f"run ended: {result['error_category']}, {result['duration_ms']} ms; bound: {report['bound']}"
    )


def _breakdown(runs: int, executor: LocalExecutor) -> None:
    """Where a run that starts its own sandbox spends its time: each layer alone, plain subprocesses."""
    python = find_interpreters()["python"].path
    limits = SandboxLimits()
    probe = probe_bwrap()
    bwrap = bwrap_argv("bwrap", probe.features, limits, ())
    minimal = ["bwrap", "--unshare-user", "--ro-bind", "/", "/"]
    wrapper = limit_wrapper(limits, limits.memory_mb, find_prlimit(True), python)
    program = [python, "-I", "-u", "-"]
    layers = {
        "python3 -I -u - (stdin program)": program,
        "prlimit + python": wrapper + program,
        "bwrap, user namespace only + python": minimal + program,
        "bwrap as the sandbox (all options) + python": bwrap + program,
        "bwrap as the sandbox + prlimit + python": bwrap + wrapper + program,
    }
    samples: dict[str, list[float]] = {label: [] for label in layers}
    for i in range(runs + 1):
        for label, argv in layers.items():
            started = time.perf_counter()
            done = subprocess.run(  # type: ignore[call-overload]
                argv, input=b"print(1)\n", capture_output=True, env=ENV, check=False, **drop_privileges()
            )
            if i:
                samples[label].append(time.perf_counter() - started)
            assert done.stdout == b"1\n", done.stderr
    parent = executor.run_parent
    if parent is not None:
        moves: list[float] = []
        for _ in range(runs):
            time.sleep(0.05)  # apart, as runs come: moves in quick succession share one RCU grace period
            cgroup = RunCgroup(parent, limits.memory_mb * 1024 * 1024, 64)
            sleeper = subprocess.Popen(["sleep", "60"])
            started = time.perf_counter()
            cgroup.add(sleeper.pid)
            moves.append(time.perf_counter() - started)
            sleeper.kill()
            sleeper.wait()
            cgroup.release()
            REMOVER.wait()
        samples[f"moving a process into a cgroup v{parent.version}"] = moves
    print("where a run that starts its own sandbox spends its time (each layer alone):")
    _print_rows(samples)


async def main() -> None:
    """Run the benchmarks and print the figures."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--concurrent", type=int, default=20)
    parser.add_argument("--watchdog", action="store_true", help="bound runs with the watchdog, not cgroups")
    parser.add_argument("--breakdown", action="store_true", help="also time each layer of a sandbox alone")
    args = parser.parse_args()

    cgroups = not args.watchdog
    ahead = LocalExecutor(SandboxLimits(), cgroups=cgroups, ahead=1)
    cold = LocalExecutor(SandboxLimits(), cgroups=cgroups)
    print(describe(ahead))
    print(f"memory bound in force: {ahead.memory_bound}")
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} ({os.cpu_count()} CPUs)")
    interpreters = find_interpreters()

    async def sandboxed(executor: LocalExecutor, language: str, code: str) -> None:
        result = await executor.run(code, language)
        assert result.success and result.stdout == "1\n", result

    languages = [("python", "print(1)", [interpreters["python"].path, "-c", "print(1)"])]
    if "javascript" in ahead.languages():
        node = interpreters["javascript"].path
        languages.append(("node", "console.log(1)", [node, "-e", "console.log(1)"]))
    for language, code, bare_argv in languages:
        lang = "javascript" if language == "node" else language

        async def settle(lang: str = lang) -> None:
            # Untimed: the replacement started ahead is ready, and no removal of a cgroup still runs.
            assert await ahead.prepare(lang)
            await asyncio.to_thread(REMOVER.wait)

        calls: dict[str, Callable[[], Awaitable[None]]] = {
            f"bare {language} ({code})": functools.partial(_bare, *bare_argv),
            f"sandbox {language}, started ahead": functools.partial(sandboxed, ahead, lang, code),
            f"sandbox {language}, started for the run": functools.partial(sandboxed, cold, lang, code),
        }
        medians = list(_print_rows(await _in_turns(args.runs, calls, settle)).values())
        print(_ratio_line(language, medians[1], medians[0], "started ahead"))
        print(_ratio_line(language, medians[2], medians[0], "started for the run"))

    code = (
        "import os\n"
        "open('own-{i}.txt', 'w').write('{i}')\n"
        "print('value-{i}', sorted(os.listdir('.')), open('own-{i}.txt').read())"
    )
    started = time.perf_counter()
    results = await asyncio.gather(*(ahead.run(code.format(i=i)) for i in range(args.concurrent)))
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
    await ahead.aclose()
    await cold.aclose()

    if args.breakdown:
        _breakdown(args.runs, cold)
    print(f"forking run, own cgroup:                {_held_by_forking_run(True, 0)}")
    print(f"forking run, own cgroup, started ahead: {_held_by_forking_run(True, 1)}")
    print(f"forking run, watchdog:                  {_held_by_forking_run(False, 0)}")
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
