"""The bwrap probe started ahead (core_tools/sandbox/isolation.py, `probe_bwrap_soon`): it runs once, in a
thread of its own, and `probe_bwrap` answers with its result (issue 32 §7: off the path to the first
poll)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from core_tools.sandbox import isolation
from core_tools.sandbox.model import Isolation


def test_a_probe_started_ahead_is_the_one_answered(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bwrap = tmp_path / "bwrap"  # a bwrap that cannot make a sandbox: a probe that fails, the same each time
    bwrap.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    bwrap.chmod(0o755)
    probed = isolation._probe
    threads: list[str] = []

    def counted(path: str | None) -> isolation.Probe:
        threads.append(threading.current_thread().name)
        return probed(path)

    monkeypatch.setattr(isolation, "_probe", counted)
    isolation.probe_bwrap_soon(str(bwrap))
    isolation.probe_bwrap_soon(str(bwrap))  # already under way: not a second probe
    answer = isolation.probe_bwrap(str(bwrap))
    assert isolation.probe_bwrap(str(bwrap)) is answer
    assert threads == ["bwrap-probe"]
    assert answer.isolation is Isolation.UNAVAILABLE and str(bwrap) in answer.reason
    assert isolation.probe_bwrap(str(bwrap), refresh=True).reason == answer.reason  # the same, run again
    assert threads == ["bwrap-probe", "MainThread"]
