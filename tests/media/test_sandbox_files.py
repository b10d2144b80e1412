"""The user's files under in/ of a code run, and files written under out/ sent back (charts as photos)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core_tools.sandbox import LocalExecutor
from core_tools.sandbox.model import FileLimits
from db.models import CodeExecution
from tests.support.fakes.openai_api import FakeLLM, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, rows, running_bot
from tests.support.media_files import PNG_SIGNATURE

CHART = """
import pandas as pd
import matplotlib.pyplot as plt
df = pd.read_csv("in/sales.csv")
print("total", int(df["sales"].sum()))
df.plot(x="month", y="sales", kind="bar")
plt.savefig("out/chart.png")
df.describe().to_csv("out/summary.csv")
"""


@pytest.mark.slow  # needs the data toolkit (installed on first use)
async def test_csv_analysed_by_the_code_tool_comes_back_as_a_chart(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, sandbox_toolkit: str
) -> None:
    csv = b"month,sales\njan,10\nfeb,32\nmar,18\n"
    llm.script(
        text("Got the spreadsheet."),
        tool_calls(call("code", {"action": "execute", "code": CHART})),
        text("Here is your chart."),
    )
    async with running_bot(tmp_path, tg, llm, code_python_env=sandbox_toolkit) as h:
        tg.push_document(OWNER, csv, "sales.csv", "text/csv")
        await h.final_text(OWNER, "Got the spreadsheet.")
        tg.push_text(OWNER, "plot the sales column")
        await h.final_text(OWNER, "Here is your chart.", timeout=60)
        (photo,) = tg.calls_to("sendPhoto")
        assert photo.params["photo"].filename == "chart.png"
        assert photo.params["photo"].data.startswith(PNG_SIGNATURE)
        (document,) = tg.calls_to("sendDocument")
        assert document.params["document"].filename == "summary.csv"
        result = json.loads(llm.requests[2]["messages"][-1]["content"])
        assert result["success"] and "total 60" in result["stdout"], result
        assert {f["name"] for f in result["files_sent_to_chat"]} == {"chart.png", "summary.csv"}
        (run,) = rows(h, CodeExecution)
        sizes = {f["name"]: f["size"] for f in run["files_out"]}
        assert sizes["chart.png"] == len(photo.params["photo"].data)


async def test_in_is_read_only_out_is_bounded_and_the_bots_env_is_invisible(
    tmp_path: Path, sandbox_toolkit: str
) -> None:
    executor = LocalExecutor(python_env=sandbox_toolkit)
    bot_env = str(Path(__file__).resolve().parents[2] / ".venv")
    code = f"""
import os, numpy
try:
    open("in/a.txt", "w").write("changed")
    print("WROTE")
except OSError as exc:
    print("read-only", type(exc).__name__)
print(open("in/a.txt").read())
print("bot env visible:", os.path.exists({bot_env!r}))
for i in range(5):
    open(f"out/f{{i}}.txt", "w").write("x" * (100 * i))
"""
    result = await executor.run(code, files_in={"a.txt": b"original"}, files_out=FileLimits(3, 250))
    assert result.success, result.stderr
    assert "read-only" in result.stdout and "WROTE" not in result.stdout and "original" in result.stdout
    assert "bot env visible: False" in result.stdout
    assert [f.name for f in result.files_out] == ["f0.txt", "f1.txt", "f2.txt"]
    assert len(result.files_skipped) == 2 and any(
        "over the limit of 3 files" in s for s in result.files_skipped
    )


@pytest.mark.slow  # needs the data toolkit (installed on first use)
async def test_a_run_cut_by_the_clock_hands_nothing_back(tmp_path: Path) -> None:
    executor = LocalExecutor()
    code = "open('out/partial.txt', 'w').write('x')\nimport time\ntime.sleep(30)"
    result = await executor.run(code, timeout_s=1, files_out=FileLimits())
    assert result.timed_out and result.files_out == ()
