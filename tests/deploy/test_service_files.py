"""The user's files in and a run's files out through the whole bot, with a real sandbox service process (and
with the local bwrap sandbox): files travel apart from the program, within limits of their own, and what
does not fit is named, never lost silently and never fatal for the run."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from core_tools.sandbox import Isolation, detect_isolation
from tests.deploy.test_service import Service
from tests.support.fakes.openai_api import FakeLLM, call, text, tool_calls
from tests.support.fakes.telegram_api import FakeTelegram
from tests.support.harness import OWNER, running_bot

ISOLATION, REASON = detect_isolation()
pytestmark = [
    pytest.mark.slow,  # sandbox service processes
    pytest.mark.skipif(ISOLATION is not Isolation.BWRAP, reason=f"no working bwrap: {REASON}"),
]


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """Start `python -m core_tools.sandbox.service` on a socket; its path."""
    started: list[Service] = []

    def _start(*args: str) -> Path:
        sock = tmp_path / "run" / "sandbox.sock"
        started.append(Service(sock, "--timeout", "20", *args).start())
        return sock

    yield _start
    for one in started:
        one.stop()


def tool_result(llm: FakeLLM) -> dict[str, Any]:
    """What the model was told about its last tool call."""
    result: dict[str, Any] = json.loads(llm.requests[-1]["messages"][-1]["content"])
    return result


async def test_a_big_file_in_the_session_does_not_break_every_run(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, service: Callable[..., Path]
) -> None:
    """A 1,070 KB CSV in the session made every run through the service fail as "too large" (even print(1));
    it now travels apart from the program, and a file over the service's own limit is left out with a note
    the model sees while the run goes on."""
    sock = service("--max-files-in-mb", "2")
    csv = b"n,square\n" + b"".join(f"{i},{i * i}\n".encode() for i in range(200_000))
    csv = csv[: 1_070 * 1024]
    huge = b"a line of the log\n" * (3 * 1024 * 1024 // 18)  # 3 MB: over the service's 2 MB for a run's files
    program = "import os\nprint(1, sorted(os.listdir('in')), os.path.getsize('in/data.csv'))"
    llm.script(
        text("Got the table."),
        text("Got the log."),
        tool_calls(call("code", {"action": "execute", "code": program})),
        text("Ran it."),
    )
    async with running_bot(tmp_path, tg, llm, code_sandbox_socket=str(sock)) as h:
        tg.push_document(OWNER, csv, "data.csv", "text/csv")
        await h.final_text(OWNER, "Got the table.")
        tg.push_document(OWNER, huge, "huge.txt", "text/plain")
        await h.final_text(OWNER, "Got the log.")
        tg.push_text(OWNER, "print 1")
        await h.final_text(OWNER, "Ran it.", timeout=60)
        result = tool_result(llm)
        assert result["success"] is True, result
        assert result["stdout"] == f"1 ['data.csv'] {len(csv)}\n"
        assert result["files_not_in"] == [
            "huge.txt (3 MB): over the code sandbox's limit of 2 MB for all files of a run; not in in/"
        ]


HOLES_THEN_SMALL = """
for i in range(10):
    with open(f"out/big{i}.bin", "wb") as f:
        f.truncate(15 * 1024 * 1024)  # 15 MB of holes: ten fit the 64 MB working directory
with open("out/small.txt", "w") as f:
    f.write("fits")
print("written")
"""


@pytest.mark.parametrize("where", ["local bwrap", "service"])
async def test_files_out_over_the_limits_are_named_and_what_fits_is_sent(
    tmp_path: Path, tg: FakeTelegram, llm: FakeLLM, service: Callable[..., Path], where: str
) -> None:
    """Ten 15 MB files written to out/ before a small one: nothing was sent and nobody was told."""
    overrides = {"code_sandbox_socket": str(service())} if where == "service" else {}
    llm.script(tool_calls(call("code", {"action": "execute", "code": HOLES_THEN_SMALL})), text("Done."))
    async with running_bot(tmp_path, tg, llm, **overrides) as h:
        tg.push_text(OWNER, "write the files")
        await h.final_text(OWNER, "Done.", timeout=60)
        # What fits is sent.
        (document,) = tg.calls_to("sendDocument")
        assert document.params["document"].filename == "small.txt"
        assert document.params["document"].data == b"fits"
        # The model is told what was sent and what was not, and why.
        result = tool_result(llm)
        assert result["success"] is True and result["stdout"] == "written\n"
        assert result["files_sent_to_chat"] == [{"name": "small.txt", "bytes": 4}]
        why = [f"big{i}.bin (15 MB): over the limit of 10 MB per file" for i in range(10)]
        assert result["files_not_sent"] == why
        # So is the user, in the chat.
        note = await h.final_text(OWNER, "were not sent")
        assert all(line in note for line in why)
