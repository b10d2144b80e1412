"""deploy/healthcheck, the health checks' wrapper in the image, run as Docker runs it (a real /bin/sh, a real
check command): the check runs at every probe until it first passes, then at most once every EVERY seconds,
and a state left by an earlier start of the container is not trusted; with --file, the bot's heartbeat is read
at every probe, its watchdog's reason shown at once, and a process stuck past the limit stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

WRAPPER = Path(__file__).resolve().parents[2] / "deploy" / "healthcheck"


class Check:
    """A check command that counts its runs and exits with the code in a file, so a test can flip it."""

    def __init__(self, folder: Path) -> None:
        self.runs = folder / "runs"
        self.code = folder / "code"
        self.runs.write_text("")
        self.code.write_text("1")

    def argv(self) -> list[str]:
        """The command line the wrapper runs."""
        script = f'echo run >>"{self.runs}"; rc=$(cat "{self.code}"); echo "check said $rc"; exit "$rc"'
        return ["sh", "-c", script]

    def count(self) -> int:
        """How many times the check ran."""
        return len(self.runs.read_text().splitlines())


def probe(check: Check, every: int, state: Path) -> subprocess.CompletedProcess[str]:
    """One probe as Docker runs it: `healthcheck EVERY COMMAND...` in the container's environment."""
    return subprocess.run(
        [str(WRAPPER), str(every), *check.argv()],
        env={"PATH": "/usr/bin:/bin", "HEALTHCHECK_STATE": str(state)},
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def check(tmp_path: Path) -> Check:
    return Check(tmp_path)


def test_every_probe_checks_until_the_first_pass_then_once_a_period(check: Check, tmp_path: Path) -> None:
    state = tmp_path / "state"
    for expected in (1, 2, 3):  # starting: failures are not kept, each probe checks again
        failed = probe(check, 60, state)
        assert failed.returncode == 1 and failed.stdout == "check said 1\n"
        assert check.count() == expected
    check.code.write_text("0")
    passed = probe(check, 60, state)
    assert passed.returncode == 0 and passed.stdout == "check said 0\n" and check.count() == 4
    check.code.write_text("1")  # would fail now, but the pass is less than a minute old
    for _ in range(3):
        cached = probe(check, 60, state)
        assert cached.returncode == 0 and cached.stdout == "check said 0\n"
    assert check.count() == 4


def test_a_failure_after_the_first_pass_is_kept_for_the_period(check: Check, tmp_path: Path) -> None:
    state = tmp_path / "state"
    check.code.write_text("0")
    assert probe(check, 0, state).returncode == 0  # a period of 0: the next probe checks again
    check.code.write_text("3")
    assert probe(check, 0, state).returncode == 3 and check.count() == 2
    check.code.write_text("0")
    kept = probe(check, 60, state)
    assert kept.returncode == 3 and kept.stdout == "check said 3\n" and check.count() == 2


def test_the_state_of_an_earlier_start_is_not_trusted(check: Check, tmp_path: Path) -> None:
    """A restarted container keeps its /tmp (the bot's is not a tmpfs): a pass from before must not count."""
    state = tmp_path / "state"
    check.code.write_text("0")
    assert probe(check, 60, state).returncode == 0 and check.count() == 1
    _start, checked_at, code = state.read_text().splitlines()[0].split()
    state.write_text(f"an-earlier-start {checked_at} {code}\ncheck said 0\n")
    check.code.write_text("1")
    restarted = probe(check, 60, state)
    assert restarted.returncode == 1 and restarted.stdout == "check said 1\n" and check.count() == 2


def test_without_a_writable_state_every_probe_checks(check: Check, tmp_path: Path) -> None:
    state = tmp_path / "missing-folder" / "state"
    check.code.write_text("0")
    for expected in (1, 2):
        answered = probe(check, 60, state)
        assert answered.returncode == 0 and answered.stderr == "" and check.count() == expected


# --- the process's heartbeat (--file) --------------------------------------------------------------------


def beat_probe(
    check: Check, state: Path, heartbeat: Path, every: int = 60, **env: str
) -> subprocess.CompletedProcess[str]:
    """A probe of the bot's container: `healthcheck EVERY --file HEARTBEAT COMMAND...`."""
    return subprocess.run(
        [str(WRAPPER), str(every), "--file", str(heartbeat), *check.argv()],
        env={"PATH": "/usr/bin:/bin", "HEALTHCHECK_STATE": str(state), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def beat(heartbeat: Path, status: str, pid: int, age_s: float = 0) -> None:
    """The bot's heartbeat as bot/runtime/vigil writes it, last written `age_s` seconds ago."""
    heartbeat.write_text(f"{status}\npid {pid}\n")
    then = time.time() - age_s
    os.utime(heartbeat, (then, then))


def healthy_once(check: Check, folder: Path, pid: int) -> tuple[Path, Path]:
    """A start of the container that passed once, its heartbeat naming `pid`: (the state, the heartbeat)."""
    state, heartbeat = folder / "state", folder / "heartbeat"
    beat(heartbeat, "ok", pid)
    check.code.write_text("0")
    assert beat_probe(check, state, heartbeat).returncode == 0
    return state, heartbeat


@pytest.fixture
def stuck_process() -> Iterator[subprocess.Popen[bytes]]:
    """A process that stands in for a stuck bot: it ignores SIGTERM, as a blocked event loop does not act
    on it either."""
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "time.sleep(600)"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
    yield proc
    proc.kill()
    proc.wait(timeout=30)


def test_an_ok_heartbeat_lets_the_check_run_and_be_kept(check: Check, tmp_path: Path) -> None:
    state, heartbeat = tmp_path / "state", tmp_path / "heartbeat"
    beat(heartbeat, "ok", os.getpid())
    check.code.write_text("0")
    for _ in range(3):
        answered = beat_probe(check, state, heartbeat)
        assert answered.returncode == 0 and answered.stdout == "check said 0\n"
    assert check.count() == 1


def test_no_heartbeat_yet_is_starting_and_the_check_waits(check: Check, tmp_path: Path) -> None:
    check.code.write_text("0")
    starting = beat_probe(check, tmp_path / "state", tmp_path / "heartbeat")
    assert starting.returncode == 1 and "no heartbeat" in starting.stdout and check.count() == 0


def test_the_watchdogs_reason_fails_the_very_next_probe(check: Check, tmp_path: Path) -> None:
    """A pass is kept for a minute, but what the bot's watchdog reports shows at the next probe."""
    state, heartbeat = tmp_path / "state", tmp_path / "heartbeat"
    beat(heartbeat, "ok", os.getpid())
    check.code.write_text("0")
    assert beat_probe(check, state, heartbeat).returncode == 0
    reason = "unhealthy: polling makes no progress: no getUpdates succeeded for 95 s"
    beat(heartbeat, reason, os.getpid())
    told = beat_probe(check, state, heartbeat)
    assert told.returncode == 1 and told.stdout == reason + "\n"
    beat(heartbeat, "ok", os.getpid())
    assert beat_probe(check, state, heartbeat).returncode == 0 and check.count() == 1


def test_a_stale_heartbeat_fails_but_stops_nothing_before_the_limit(
    check: Check, tmp_path: Path, stuck_process: subprocess.Popen[bytes]
) -> None:
    state, heartbeat = healthy_once(check, tmp_path, stuck_process.pid)
    beat(heartbeat, "ok", stuck_process.pid, age_s=45)
    stale = beat_probe(check, state, heartbeat, HEALTH_RESTART_S="90")
    assert stale.returncode == 1 and "has not written its heartbeat for 45 s" in stale.stdout
    assert "stopping" not in stale.stdout and stuck_process.poll() is None


def test_a_process_stuck_past_the_limit_is_stopped_then_killed(
    check: Check, tmp_path: Path, stuck_process: subprocess.Popen[bytes]
) -> None:
    """Docker never restarts an unhealthy container: the probe ends the stuck process instead, so the
    container exits and its restart policy starts it again."""
    state, heartbeat = healthy_once(check, tmp_path, stuck_process.pid)
    beat(heartbeat, "ok", stuck_process.pid, age_s=100)
    asked = beat_probe(check, state, heartbeat, HEALTH_RESTART_S="90")
    assert asked.returncode == 1 and f"stopping process {stuck_process.pid}" in asked.stdout
    assert stuck_process.poll() is None  # it ignores SIGTERM, as a blocked event loop would not act on it
    beat(heartbeat, "ok", stuck_process.pid, age_s=125)
    killed = beat_probe(check, state, heartbeat, HEALTH_RESTART_S="90")
    assert killed.returncode == 1 and f"killed process {stuck_process.pid}" in killed.stdout
    assert stuck_process.wait(timeout=30) == -signal.SIGKILL


def test_a_stale_heartbeat_of_an_earlier_start_stops_nothing(
    check: Check, tmp_path: Path, stuck_process: subprocess.Popen[bytes]
) -> None:
    """A restarted container finds the heartbeat of its last process, long stale: the pid in it may be
    anyone's now, so nothing is stopped until this start has passed once."""
    beat(tmp_path / "heartbeat", "ok", stuck_process.pid, age_s=600)
    answered = beat_probe(check, tmp_path / "state", tmp_path / "heartbeat", HEALTH_RESTART_S="90")
    assert answered.returncode == 1 and "stopping" not in answered.stdout and "killed" not in answered.stdout
    assert stuck_process.poll() is None


def test_a_restart_limit_of_zero_never_stops_the_process(
    check: Check, tmp_path: Path, stuck_process: subprocess.Popen[bytes]
) -> None:
    state, heartbeat = healthy_once(check, tmp_path, stuck_process.pid)
    beat(heartbeat, "ok", stuck_process.pid, age_s=1000)
    assert beat_probe(check, state, heartbeat, HEALTH_RESTART_S="0").returncode == 1
    assert stuck_process.poll() is None
