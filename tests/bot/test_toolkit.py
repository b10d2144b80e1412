"""The sandbox's data toolkit (numpy, pandas, matplotlib): the bot installs it itself at its first start,
tells the model only what is installed, and refuses a CODE_PYTHON_ENV the code could not see."""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core_tools.sandbox.executor import LocalExecutor
from core_tools.sandbox.toolkit import DEFAULT_ENV, REQUIREMENTS, STAMP, ToolkitError, run_installer
from tests.support.fakes.openai_api import FakeLLM, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, Harness, running_bot
from tests.support.media_files import PNG_SIGNATURE
from tests.support.processes import fake_env, run_bot
from tests.support.toolkit import sandbox_visible_dir

CHART = """
import pandas as pd
import matplotlib.pyplot as plt
df = pd.read_csv("in/sheet.csv")
df.plot(y="B", kind="bar")
plt.savefig("out/column_b.png")
print("sum of B:", int(df["B"].sum()))
"""
LOG = "core_tools.sandbox.toolkit"


@pytest.fixture
def fresh_dir() -> Iterator[Path]:
    """An empty directory bwrap can mount as nobody (pytest's tmp_path is in one only root may enter)."""
    base = sandbox_visible_dir("tests")
    base.mkdir(parents=True, exist_ok=True)
    path = Path(tempfile.mkdtemp(prefix="toolkit-", dir=base))
    path.chmod(0o755)  # mkdtemp's 0700 would hide it from code that runs as nobody (the suite as root)
    yield path
    shutil.rmtree(path, ignore_errors=True)
    Path(f"{path}.lock").unlink(missing_ok=True)


def code_description(request: dict[str, Any]) -> str:
    """The `code` tool's description in one LLM request."""
    (tool,) = [t for t in request["tools"] if t["function"]["name"] == "code"]
    description: str = tool["function"]["description"]
    return description


async def until_settled(h: Harness) -> str:
    """Wait for the toolkit's install to end; its state."""
    toolkit = h.services.toolkit
    assert toolkit is not None
    state: str = await h.tg.wait_for(
        lambda: toolkit.state if toolkit.state not in ("missing", "installing") else None,
        timeout=900,
        what="the end of the toolkit's install",
    )
    return state


@pytest.mark.slow
async def test_first_start_installs_the_toolkit_and_a_code_turn_plots(
    fresh_dir: Path,
    tg: FakeTelegram,
    llm: FakeLLM,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO, logger=LOG)
    monkeypatch.chdir(fresh_dir)  # CODE_PYTHON_ENV's default, data/sandbox-python, is relative to it
    csv = b"A,B\nx,3\ny,5\nz,9\n"
    llm.script(
        text("Got the spreadsheet."),
        tool_calls(call("code", {"action": "execute", "code": CHART})),
        text("Here is column B."),
    )
    # A first install on a cold cache may take minutes here: the run waits for it as long as for a run slot.
    waits: dict[str, Any] = {"code_queue_wait_s": 600, "turn_timeout_s": 1800}
    async with running_bot(fresh_dir, tg, llm, code_python_env=DEFAULT_ENV, **waits) as h:
        assert f"installing numpy, pandas and matplotlib into {fresh_dir / DEFAULT_ENV}" in caplog.text
        # The bot answers while the toolkit installs.
        tg.push_document(OWNER, csv, "sheet.csv", "text/csv")
        await h.final_text(OWNER, "Got the spreadsheet.", timeout=120)
        tg.push_text(OWNER, "plot column B of this spreadsheet")
        await h.final_text(OWNER, "Here is column B.", timeout=900)
        (photo,) = tg.calls_to("sendPhoto")
        assert photo.params["photo"].filename == "column_b.png"
        assert photo.params["photo"].data.startswith(PNG_SIGNATURE)
        result = json.loads(llm.requests[2]["messages"][-1]["content"])
        assert result["success"] and "sum of B: 17" in result["stdout"], result
        assert await until_settled(h) == "ready"
        assert "ready at" in caplog.text and "numpy 2." in caplog.text
        # Once it is there, the model is told so.
        llm.script(text("ok"))
        tg.push_text(OWNER, "thanks")
        await h.final_text(OWNER, "ok")
        assert "Python has numpy, pandas and matplotlib" in code_description(llm.requests[-1])
    stamp = (fresh_dir / DEFAULT_ENV / STAMP).read_text().strip()
    assert stamp == hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()

    # The next start finds it up to date: nothing is installed again.
    caplog.clear()
    llm.script(text("again"))
    async with running_bot(fresh_dir, tg, llm, code_python_env=DEFAULT_ENV) as h:
        assert h.services.toolkit is not None and h.services.toolkit.state == "ready"
        tg.push_text(OWNER, "hello again")
        await h.final_text(OWNER, "again")
        assert "Python has numpy, pandas and matplotlib" in code_description(llm.requests[-1])
    assert "installing" not in caplog.text


async def test_without_the_toolkit_the_description_names_no_package(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    llm.script(text("hi"))
    async with running_bot(tmp_path, tg, llm, code_python_env="") as h:
        tg.push_text(OWNER, "hello")
        await h.final_text(OWNER, "hi")
    description = code_description(llm.requests[0])
    assert "standard library" in description
    for name in ("numpy", "pandas", "matplotlib"):
        assert name not in description


async def test_a_failed_install_is_logged_with_a_fix_and_the_model_is_told(
    fresh_dir: Path,
    tg: FakeTelegram,
    llm: FakeLLM,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    caplog.set_level(logging.INFO, logger=LOG)
    monkeypatch.setenv("UV", str(fresh_dir / "no-uv-here"))  # the installer finds no uv
    env = fresh_dir / "sandbox-python"
    llm.script(
        tool_calls(call("code", {"action": "execute", "code": "import numpy\nprint(numpy.pi)"})),
        text("Sorry, numpy is not there."),
    )
    async with running_bot(fresh_dir, tg, llm, code_python_env=str(env)) as h:
        assert await until_settled(h) == "failed"
        assert "uv not found" in caplog.text and "Fix: install uv" in caplog.text
        tg.push_text(OWNER, "what is pi in numpy?")
        await h.final_text(OWNER, "Sorry, numpy is not there.")
    description = code_description(llm.requests[0])
    assert "standard library" in description and "numpy" not in description
    result = json.loads(llm.requests[1]["messages"][-1]["content"])
    assert not result["success"] and "No module named 'numpy'" in result["stderr"]
    assert "could not be installed" in result["note"]


@pytest.mark.slow  # a `python -m bot` process
async def test_code_python_env_the_sandbox_cannot_see_is_refused_in_one_line(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM
) -> None:
    env = fake_env(
        tmp_path, tg, llm, f"sqlite:///{tmp_path / 'data' / 'assistant.db'}", CODE_PYTHON_ENV="/usr"
    )
    code, out, err = await run_bot(tmp_path, env=env)
    assert code == 2, out + err
    (line,) = err.strip().splitlines()
    assert line.startswith("Configuration error: CODE_PYTHON_ENV is invalid")
    assert "/usr is not a directory of its own" in line and "data/sandbox-python" in line
    assert tg.calls_to("getMe") == []  # refused before anything started


@pytest.mark.slow
async def test_a_checkout_under_a_folder_others_cannot_enter_installs_and_plots(
    tg: FakeTelegram,
    llm: FakeLLM,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A clone in a 0700 folder (a Fedora home, a `mktemp -d`): with the bot run as root, bwrap runs as
    nobody and could not enter it, so the first start keeps the toolkit where it can, and charts work."""
    caplog.set_level(logging.INFO, logger=LOG)
    home = Path(tempfile.mkdtemp(prefix="home-"))  # as `mktemp -d` makes it: 0700
    assert home.stat().st_mode & 0o777 == 0o700
    checkout = home / "assistant"
    checkout.mkdir()
    monkeypatch.chdir(checkout)  # CODE_PYTHON_ENV's default, data/sandbox-python, is relative to it
    llm.script(
        text("Got the spreadsheet."),
        tool_calls(call("code", {"action": "execute", "code": CHART})),
        text("Here is column B."),
    )
    place: Path | None = None
    try:
        # A first install on a cold cache may take minutes: the run waits for it as long as for a run slot.
        async with running_bot(
            checkout, tg, llm, code_python_env=DEFAULT_ENV, code_queue_wait_s=600, turn_timeout_s=1800
        ) as h:
            assert h.services.toolkit is not None
            place = h.services.toolkit.env
            tg.push_document(OWNER, b"A,B\nx,3\ny,5\nz,9\n", "sheet.csv", "text/csv")
            await h.final_text(OWNER, "Got the spreadsheet.", timeout=120)
            tg.push_text(OWNER, "plot column B of this spreadsheet")
            await h.final_text(OWNER, "Here is column B.", timeout=900)
            assert await until_settled(h) == "ready", h.services.toolkit.reason
        result = json.loads(llm.requests[2]["messages"][-1]["content"])
        assert result["success"] and "sum of B: 17" in result["stdout"], result
        (photo,) = tg.calls_to("sendPhoto")
        assert photo.params["photo"].data.startswith(PNG_SIGNATURE)
        assert "not installed" not in caplog.text
        if os.geteuid() == 0:  # the sandbox runs as nobody: the log says where the toolkit went instead
            assert "(mode 0700)" in caplog.text and f"kept at {place}" in caplog.text
    finally:
        shutil.rmtree(home, ignore_errors=True)
        if place is not None and place != checkout / DEFAULT_ENV:
            shutil.rmtree(place, ignore_errors=True)
            Path(f"{place}.lock").unlink(missing_ok=True)


@pytest.mark.slow
async def test_a_toolkit_under_tmp_is_what_code_runs_import(sandbox_toolkit: str) -> None:
    """Every run gets its own empty /tmp, yet a toolkit kept under the host's /tmp (a checkout there, as
    CI machines make) is what the code imports: it is shown at a place of its own in every run."""
    place = Path(tempfile.mkdtemp(prefix="toolkit-", dir="/tmp"))
    place.chmod(0o755)  # code runs as nobody when the suite runs as root
    try:
        shutil.copytree(sandbox_toolkit, place / "env", symlinks=True)
        executor = LocalExecutor(python_env=str(place / "env"))
        assert executor.toolkit
        result = await executor.run(
            "import numpy, matplotlib.pyplot as plt\nprint('numpy', numpy.__version__)", "python", 120
        )
        assert result.success, result.stderr
        assert result.stdout.startswith("numpy 2.")
    finally:
        shutil.rmtree(place, ignore_errors=True)


async def test_a_directory_that_is_not_a_toolkit_is_never_replaced(fresh_dir: Path) -> None:
    (fresh_dir / "notes.txt").write_text("mine")
    with pytest.raises(ToolkitError, match="is not a Python environment") as failed:
        await run_installer(fresh_dir, None)
    assert "Fix: set CODE_PYTHON_ENV to an empty or new directory" in str(failed.value)
    assert (fresh_dir / "notes.txt").read_text() == "mine"


@pytest.mark.slow
async def test_two_installs_at_once_install_once(fresh_dir: Path) -> None:
    target = fresh_dir / "sandbox-python"
    first, second = await asyncio.gather(run_installer(target, None), run_installer(target, None))
    assert sorted([first, second]) == [
        f"sandbox toolkit: installed at {target}",
        f"sandbox toolkit: up to date at {target} (installed meanwhile)",
    ]
    again = await run_installer(target, None)
    assert again == f"sandbox toolkit: up to date at {target}"
