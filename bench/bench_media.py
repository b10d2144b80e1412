"""Benchmark of the media paths: `uv run python bench/bench_media.py [--turns 20] [--runs 10]`.

1. Text extraction of a 100-page PDF (written by fpdf2): core_tools.media's `extract` and the whole document
   path (`MediaService.document`: hash-named storage, a row, the text read by a worker process under limits,
   the turn's text; a bot's first file starts its worker, the next files find one started ahead) next to
   bare pypdf
   (`page.extract_text()` for every page); pages per second and peak Python memory (tracemalloc).
2. A voice turn's media path next to a text turn, through the real bot against the loopback fakes (the
   transcription endpoint answers at once): time from the update to the final answer, median of `--turns`.
   Target: a voice turn at most 1.5x a text turn.
3. A pandas + matplotlib chart (read in/sales.csv, plot, save out/chart.png) through the sandbox, with the
   file in and the chart back, next to bare `python3` of the same toolkit running the same script in a
   plain directory. Target: at most 1.5x bare.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core_tools.media import MediaConfig, MediaService, extract
from core_tools.sandbox import LocalExecutor
from core_tools.sandbox.model import FileLimits
from db.engine import make_engine, make_sessionmaker
from db.media import MediaFiles
from db.migrate import upgrade
from tests.support.fakes.openai_api import FakeLLM, text
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, TOKEN, running_bot
from tests.support.media_files import make_wav

TOOLKIT = "/opt/assistant-sandbox"
CHART = """
import pandas as pd
import matplotlib.pyplot as plt
df = pd.read_csv("in/sales.csv")
df.plot(x="month", y="sales", kind="bar")
plt.savefig("out/chart.png")
print(int(df["sales"].sum()))
"""
CSV = b"month,sales\n" + b"".join(f"m{i},{i * 7 % 50}\n".encode() for i in range(120))


def make_pdf(pages: int) -> bytes:
    """A PDF of `pages` pages of prose."""
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("Helvetica", size=10)
    line = "The quarterly figures show steady growth in every region and a small rise in costs. "
    for n in range(pages):
        pdf.add_page()
        pdf.multi_cell(0, 5, f"Page {n + 1}. " + line * 25)
    return bytes(pdf.output())


def measure(call: Callable[[], Any], repeat: int = 3) -> tuple[float, float]:
    """Best wall time of `repeat` calls (s) and the peak traced memory of one call (MB)."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - started)
    tracemalloc.start()
    call()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return best, peak / 1e6


def bench_pdf() -> None:
    """Section 1."""
    from pypdf import PdfReader

    pages = 100
    data = make_pdf(pages)
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{tmp}/bench.db"
        upgrade(url)
        engine = make_engine(url)
        rows_table = MediaFiles(make_sessionmaker(engine), engine)
        service = MediaService(rows_table, MediaConfig(root=Path(tmp) / "media"))
        loop = asyncio.new_event_loop()  # one loop, as in the bot: the worker started ahead belongs to it

        def first_file() -> None:
            """A bot's first file: no worker started ahead yet (it starts one for the next file)."""
            fresh = MediaService(rows_table, MediaConfig(root=Path(tmp) / "media"))
            loop.run_until_complete(fresh.document(1, 1, "r.pdf", None, data))
            loop.run_until_complete(fresh.reader.aclose())

        def bare() -> None:
            for page in PdfReader(io.BytesIO(data)).pages:
                page.extract_text()

        rows = [
            ("bare pypdf extract_text", measure(bare)),
            ("core_tools.media.extract", measure(lambda: extract("r.pdf", "application/pdf", data))),
            ("MediaService.document, a bot's first file", measure(first_file)),
            (
                "MediaService.document, the next files",  # a worker started ahead takes each
                measure(lambda: loop.run_until_complete(service.document(1, 1, "r.pdf", None, data))),
            ),
        ]
        loop.run_until_complete(service.reader.aclose())
        loop.close()
        engine.dispose()
    print(f"1. text extraction of a {pages}-page PDF ({len(data) / 1024:.0f} KB)")
    base = rows[0][1][0]
    for name, (seconds, peak) in rows:
        print(
            f"   {name:42s} {seconds * 1000:8.1f} ms  {pages / seconds:7.1f} pages/s  "
            f"peak {peak:6.1f} MB  ({seconds / base:.2f}x bare)"
        )


async def bench_turns(turns: int) -> None:
    """Section 2."""
    audio = make_wav(1.0)
    text_times: list[float] = []
    voice_times: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        async with FakeTelegram(token=TOKEN) as tg, FakeLLM() as llm:
            llm.default = text("Done.")
            llm.transcript = "what is on my list today"
            async with running_bot(Path(tmp), tg, llm, stream_edit_interval_s=0) as h:
                for i in range(turns + 1):  # the first of each is a warm-up
                    for kind, samples in (("text", text_times), ("voice", voice_times)):
                        before = len(tg.sent_texts(OWNER))
                        started = time.perf_counter()
                        if kind == "text":
                            tg.push_text(OWNER, "what is on my list today")
                        else:
                            tg.push_voice(OWNER, audio, duration=1)
                        await tg.wait_for(
                            lambda b=before: (
                                len(tg.sent_texts(OWNER)) > b and "Done." in tg.sent_texts(OWNER)[-1]
                            )
                        )
                        if i:
                            samples.append(time.perf_counter() - started)
                assert len(llm.transcription_requests) == turns + 1
                del h
            floor = await bare_voice_requests(tg, llm, audio, turns)
    t, v = statistics.median(text_times), statistics.median(voice_times)
    print(
        f"2. a turn, update to final answer, median of {turns} (fake Bot API and LLM; transcription instant)"
    )
    print(f"   text turn   {t * 1000:7.1f} ms")
    print(f"   voice turn  {v * 1000:7.1f} ms  ({v / t:.2f}x a text turn; target <= 1.5x)")
    print(
        f"   floor: the three requests a voice note adds (getFile, the download, the transcription), made "
        f"bare with PTB's Bot and the openai client: {floor * 1000:.1f} ms -> text turn + them = "
        f"{(t + floor) / t:.2f}x a text turn"
    )


async def bare_voice_requests(tg: FakeTelegram, llm: FakeLLM, audio: bytes, turns: int) -> float:
    """Median time of getFile + download + transcription with the bare clients, no bot around them."""
    from openai import AsyncOpenAI, DefaultAioHttpClient
    from telegram import Bot

    times: list[float] = []
    async with (
        Bot(TOKEN, base_url=tg.base_url, base_file_url=tg.base_file_url) as bot,
        AsyncOpenAI(base_url=llm.base_url, api_key="k", http_client=DefaultAioHttpClient()) as client,
    ):
        for i in range(turns + 1):
            file_id = tg.add_file(audio, "voice/file.oga")
            started = time.perf_counter()
            tg_file = await bot.get_file(file_id)
            data = bytes(await tg_file.download_as_bytearray())
            await client.audio.transcriptions.create(model="whisper-1", file=("voice.oga", data))
            if i:
                times.append(time.perf_counter() - started)
    return statistics.median(times)


async def bench_chart(runs: int) -> None:
    """Section 3."""
    if not Path(TOOLKIT, "bin", "python3").exists():
        print(f"3. chart round trip: skipped, no data toolkit at {TOOLKIT} (scripts/sandbox-toolkit.sh)")
        return
    executor = LocalExecutor(python_env=TOOLKIT)
    sandbox: list[float] = []
    bare: list[float] = []
    for i in range(runs + 1):
        started = time.perf_counter()
        result = await executor.run(CHART, files_in={"sales.csv": CSV}, files_out=FileLimits())
        elapsed = time.perf_counter() - started
        assert result.success and result.files_out, result.stderr
        with tempfile.TemporaryDirectory() as work:
            Path(work, "in").mkdir()
            Path(work, "out").mkdir()
            Path(work, "in", "sales.csv").write_bytes(CSV)
            started_bare = time.perf_counter()
            done = subprocess.run(
                [f"{TOOLKIT}/bin/python3", "-I", "-"],
                input=CHART.encode(),
                cwd=work,
                capture_output=True,
                env={"MPLBACKEND": "Agg", "HOME": work, "PATH": "/usr/bin:/bin"},
                check=False,
            )
            bare_elapsed = time.perf_counter() - started_bare
            assert done.returncode == 0 and Path(work, "out", "chart.png").exists(), done.stderr
        if i:  # the first of each is a warm-up (bare python builds matplotlib's font cache once)
            sandbox.append(elapsed)
            bare.append(bare_elapsed)
    s, b = statistics.median(sandbox), statistics.median(bare)
    print(f"3. pandas + matplotlib chart, CSV in and PNG back, median of {runs} ({executor.isolation})")
    print(f"   bare python3  {b * 1000:7.1f} ms")
    print(f"   sandbox       {s * 1000:7.1f} ms  ({s / b:.2f}x bare; target <= 1.5x)")


def main() -> None:
    """Run the three sections."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    bench_pdf()
    asyncio.run(bench_turns(args.turns))
    asyncio.run(bench_chart(args.runs))


if __name__ == "__main__":
    main()
