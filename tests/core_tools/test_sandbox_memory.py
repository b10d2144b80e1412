"""CODE_MEMORY_MB bounds a whole run (all its processes and every tmpfs), measured on the host.

Each case runs the real executor in a helper process placed in a measuring cgroup of our own (no limit),
so the kernel records the most memory the helper and everything it started ever held: that is what the
host gave the run, whether the run's bound was its own cgroup or the watchdog. Both bounds are tested
here: `cgroups=False` forces the watchdog. Needs a writable cgroup v1 memory hierarchy (this machine).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from core_tools.sandbox import Isolation, LocalExecutor, SandboxLimits, describe, detect_isolation
from tests.support.measuring_cgroup import FORKS, measured_run, own_memory_cgroup

ISOLATION, REASON = detect_isolation()
MIB = 1024 * 1024
LIMIT_MB = 256
# What the host may hold beyond the limit: the helper's own growth, plus (watchdog) what the run can fault
# in between two samples 5 ms apart.
SLACK = {"cgroup": 24 * MIB, "watchdog": 96 * MIB}

# 1 GB in 8 MB files (RLIMIT_FSIZE caps one file at 16 MB) into one directory; prints what it managed.
FILL = """
import os
written, error = 0, None
chunk = b'x' * (8 * 1024 * 1024)
for n in range(128):
    try:
        with open(os.path.join({target!r}, f'fill-{{n}}'), 'wb') as handle:
            handle.write(chunk)
        written += len(chunk)
    except OSError as exc:
        error = exc.strerror
        break
print(written // (1024 * 1024), error, flush=True)
"""

OWN = own_memory_cgroup()
pytestmark = [
    pytest.mark.skipif(ISOLATION is not Isolation.BWRAP, reason=f"no working bwrap: {REASON}"),
    pytest.mark.skipif(OWN is None, reason="no writable cgroup v1 memory hierarchy to measure with"),
]


def _measured_run(
    code: str, bound: str, scratch_mb: int = 64, as_nobody: bool = False, ahead: int = 0
) -> dict[str, Any]:
    """Run `code` under `bound` in a measuring cgroup (with `ahead`, in a sandbox started before the run
    came); its report, once no run cgroup is left behind."""
    limits = {"memory_mb": LIMIT_MB, "scratch_mb": scratch_mb, "timeout_s": 20}
    report = measured_run(
        code,
        cgroups=bound == "cgroup",
        limits=limits,
        as_nobody=as_nobody,
        prefix="test-measure",
        ahead=ahead,
    )
    # Every run cgroup the executor made is gone once it returned.
    assert report["leftover_cgroups"] == []
    return report


@pytest.mark.parametrize("ahead", [0, 1], ids=["started-for-the-run", "started-ahead"])
@pytest.mark.parametrize("bound", ["cgroup", "watchdog"])
def test_forked_children_cannot_exceed_the_limit_together(bound: str, ahead: int) -> None:
    report = _measured_run(FORKS, bound, ahead=ahead)
    result = report["result"]
    assert report["bound"].startswith("cgroup v" if bound == "cgroup" else "watchdog")
    # Six children touching 200 MB each would hold 1.2 GB: the run is stopped and the model told why.
    assert not result["success"] and result["error_category"] == "memory", result
    assert f"[killed: memory limit of {LIMIT_MB} MB for the whole run exceeded]" in result["stderr"]
    assert report["held"] <= LIMIT_MB * MIB + SLACK[bound], report["held"] / MIB


@pytest.mark.parametrize("bound", ["cgroup", "watchdog"])
@pytest.mark.parametrize("target", ["/dev/shm", "/dev", "/tmp", "/scratch"])
def test_one_gigabyte_into_a_tmpfs_is_stopped(bound: str, target: str) -> None:
    report = _measured_run(FILL.format(target=target), bound)
    result = report["result"]
    # The sized tmpfs mounts fill up (/dev is read-only); nothing near 1 GB lands on the host.
    written = int(result["stdout"].split()[0]) if result["stdout"] else 0
    assert written <= 64, result
    assert report["held"] <= LIMIT_MB * MIB + SLACK[bound], report["held"] / MIB


@pytest.mark.parametrize("ahead", [0, 1], ids=["started-for-the-run", "started-ahead"])
@pytest.mark.parametrize("bound", ["cgroup", "watchdog"])
def test_tmpfs_pages_count_against_the_run(bound: str, ahead: int) -> None:
    # tmpfs mounts as large as 1 GB: only the run's memory bound stands between the run and the host.
    report = _measured_run(FILL.format(target="/dev/shm"), bound, scratch_mb=1024, ahead=ahead)
    result = report["result"]
    written = int(result["stdout"].split()[0]) if result["stdout"] else 0
    assert written < LIMIT_MB, result
    assert not result["success"] and result["error_category"] == "memory", result
    assert report["held"] <= LIMIT_MB * MIB + SLACK[bound], report["held"] / MIB


@pytest.mark.parametrize("ahead", [0, 1])
async def test_normal_runs_pass_and_leave_no_cgroup(ahead: int) -> None:
    assert OWN is not None

    def runs() -> list[Path]:
        return sorted(p for p in OWN.iterdir() if p.name.startswith(f"sandbox-run-{os.getpid()}-"))

    def alive(cgroup: Path) -> list[int]:
        """Processes in a cgroup that are not exiting: a sandbox's init may still be tearing its namespaces
        down (PF_EXITING, its memory gone: it runs no code of the run) when the run has returned."""
        found = []
        with contextlib.suppress(OSError):
            for pid in (cgroup / "cgroup.procs").read_text().split():
                with contextlib.suppress(OSError):
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                    if fields[0] not in "ZX" and not int(fields[6]) & 0x4:  # PF_EXITING
                        found.append(int(pid))
        return found

    before = runs()
    executor = LocalExecutor(SandboxLimits(memory_mb=LIMIT_MB), ahead=ahead)
    assert "memory bound: cgroup v1 (whole run)" in describe(executor)
    code = (
        "import os\nblock = bytearray(100 * 1024 * 1024)\nopen('/dev/shm/x', 'w').write('ok')\nprint('fine')"
    )
    for _ in range(2):  # with `ahead`, the second run takes the sandbox the first one had started
        result = await executor.run(code)
        assert result.success and result.stdout == "fine\n", result.stderr
        # Nothing of the run is left in any run cgroup: only a sandbox started ahead holds one.
        busy = [p for p in runs() if p not in before and alive(p)]
        assert len(busy) <= ahead, busy
    await executor.aclose()
    assert runs() == before
    watched = LocalExecutor(SandboxLimits(memory_mb=LIMIT_MB), cgroups=False, ahead=ahead)
    assert "memory bound: watchdog" in describe(watched)
    assert (await watched.run(code)).stdout == "fine\n"
    await watched.aclose()


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_a_user_without_cgroups_falls_back_to_the_watchdog() -> None:
    report = _measured_run(FORKS, "cgroup", as_nobody=True)  # cgroups wanted, none may be created
    assert report["bound"].startswith("watchdog") and "Permission denied" in report["bound"]
    assert report["result"]["error_category"] == "memory", report["result"]
    assert report["held"] <= LIMIT_MB * MIB + SLACK["watchdog"], report["held"] / MIB
