"""Which jobs a starting process reports as interrupted: those whose process is gone, never a live one's."""

from __future__ import annotations

import socket
import subprocess

from sqlalchemy import Engine

from core_tools.code.tool import CodeTool
from core_tools.sandbox import LocalExecutor, SandboxLimits
from db.engine import make_sessionmaker
from db.executions import Executions
from db.jobs import Jobs


async def test_only_jobs_of_ended_processes_are_interrupted(engine: Engine) -> None:
    sm = make_sessionmaker(engine)
    jobs = Jobs(sm)
    host = socket.gethostname()
    dead = subprocess.Popen(["true"])
    dead.wait()
    alive = subprocess.Popen(["sleep", "30"])
    try:
        for job_id, runner in [
            ("dead", f"{host}:{dead.pid}"),
            ("alive", f"{host}:{alive.pid}"),  # another process still running it (an MCP server, say)
            ("elsewhere", "old-container:1"),
        ]:
            jobs.started(
                job_id, user_id=1, chat_id=1, session_id=None, task=job_id, language="python", runner=runner
            )
        tool = CodeTool(LocalExecutor(SandboxLimits()), Executions(sm), jobs_db=jobs)
        stale = await tool.recover()
        assert sorted(j.id for j in stale) == ["dead", "elsewhere"]
        assert [j.id for j in jobs.running()] == ["alive"]
        row = jobs.get("dead", 1)
        assert row is not None and row.status == "interrupted" and "restarted" in str(row.result)
        assert jobs.get("dead", 2) is None  # another user's job does not answer
    finally:
        alive.kill()
        alive.wait()
