"""The sandbox from folders others cannot enter (a 0700 home, a `mktemp -d`): with the bot run as root, bwrap
runs as nobody and cannot look up anything below such a folder, yet the toolkit and the user's files reach
every run (real bwrap, real installer)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from core_tools.sandbox import Isolation, LocalExecutor, SandboxLimits, detect_isolation
from core_tools.sandbox.isolation import closed_to_runs
from core_tools.sandbox.model import FileLimits
from core_tools.sandbox.toolkit import Toolkit
from tests.support.media_files import PNG_SIGNATURE

ISOLATION, REASON = detect_isolation()
pytestmark = pytest.mark.skipif(ISOLATION is not Isolation.BWRAP, reason=f"no working bwrap: {REASON}")
LIMITS = SandboxLimits(timeout_s=60.0, max_timeout_s=120.0)
CHART = """
import os
import pandas as pd
import matplotlib.pyplot as plt
df = pd.read_csv("in/sheet.csv")
df.plot(y="B", kind="bar")
plt.savefig("out/b.png")
print("sum", int(df["B"].sum()), "host cache seen:", os.path.exists("/var/cache/assistant-sandbox"))
"""


@pytest.fixture
def closed_folder() -> Iterator[Path]:
    """A folder as `mktemp -d` makes it (0700), removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="closed-"))
    assert path.stat().st_mode & 0o777 == 0o700
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def _nothing(_: str) -> None:
    """Progress of the install, not looked at here."""


@pytest.mark.slow
async def test_the_first_start_install_in_a_closed_folder_gives_runs_the_toolkit(closed_folder: Path) -> None:
    configured = closed_folder / "assistant" / "data" / "sandbox-python"
    executor = LocalExecutor(LIMITS)
    toolkit = Toolkit(str(configured), executor)
    try:
        toolkit.start()
        await toolkit.wait_for_install(_nothing, 900)
        assert toolkit.state == "ready", toolkit.reason
        assert toolkit.env is not None
        assert executor.toolkit and "Python has numpy, pandas and matplotlib" in toolkit.model_note()
        if os.geteuid() == 0:  # a place nobody can enter, outside the closed folder
            assert toolkit.moved and closed_to_runs(toolkit.env) is None
            assert not toolkit.env.is_relative_to(closed_folder)
        result = await executor.run(
            CHART, "python", files_in={"sheet.csv": b"A,B\nx,3\ny,5\n"}, files_out=FileLimits()
        )
        assert result.success, result.stderr
        # The runs see the toolkit at its own place, not the host directory it is kept in.
        assert result.stdout.strip() == "sum 8 host cache seen: False"
        (chart,) = result.files_out
        assert chart.name == "b.png" and chart.data.startswith(PNG_SIGNATURE)
        report = await toolkit.probe()
        assert report.level == "ok" and "numpy 2." in report.detail
    finally:
        await toolkit.aclose()
        await executor.aclose()
        if toolkit.env is not None and toolkit.moved:
            shutil.rmtree(toolkit.env, ignore_errors=True)
            Path(f"{toolkit.env}.lock").unlink(missing_ok=True)


async def test_the_users_files_reach_runs_when_tmpdir_is_in_a_closed_folder(
    closed_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(closed_folder))  # as TMPDIR=<closed folder> would
    executor = LocalExecutor(LIMITS)
    try:
        result = await executor.run(
            "print(open('in/note.txt').read())", "python", files_in={"note.txt": b"hello from in/"}
        )
    finally:
        await executor.aclose()
    assert result.success, result.stderr
    assert result.stdout.strip() == "hello from in/"
    assert list(closed_folder.iterdir()) == []  # nothing of the run was left behind
