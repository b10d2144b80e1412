"""deploy/healthcheck, the health checks' wrapper in the image, run as Docker runs it (a real /bin/sh, a real
check command): the check runs at every probe until it first passes, then at most once every EVERY seconds,
and a state left by an earlier start of the container is not trusted."""

from __future__ import annotations

import subprocess
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
