"""The failing line, the error line and the lessons note, from real interpreters' error output."""

from __future__ import annotations

import shutil

import pytest

from core_tools.code.patterns import Failure, example, lessons
from core_tools.sandbox import Isolation, LocalExecutor, SandboxLimits, detect_isolation

ISOLATION, REASON = detect_isolation()
pytestmark = pytest.mark.skipif(ISOLATION is not Isolation.BWRAP, reason=f"no working bwrap: {REASON}")


async def run(code: str, language: str) -> tuple[str, str | None]:
    executor = LocalExecutor(SandboxLimits(timeout_s=10.0))
    try:
        result = await executor.run(code, language)
    finally:
        await executor.aclose()
    return result.stderr, result.error_category


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
async def test_a_javascript_failure_names_its_line_and_error() -> None:
    code = "const a = 1;\nfoo(a);"
    stderr, category = await run(code, "javascript")
    assert (
        example(code, stderr, "javascript", category)
        == "line 2: foo(a); → ReferenceError: foo is not defined"
    )


async def test_a_python_failure_names_its_deepest_line_of_the_program() -> None:
    code = "def f(x):\n    return x['missing']\n\nf({})"
    stderr, category = await run(code, "python")
    assert example(code, stderr, "python", category) == "line 2: return x['missing'] → KeyError: 'missing'"


def test_the_lessons_note_stays_short_and_drops_what_the_sandbox_now_has() -> None:
    failures = [
        Failure("import", "python", f"ModuleNotFoundError: No module named 'mod{i}'") for i in range(30)
    ] + [Failure("import", "python", "ModuleNotFoundError: No module named 'numpy'")] * 3
    failures += [Failure("network", "python", "URLError")] + [Failure("timeout", "python", "")] * 2
    failures += [Failure("memory", "python", "MemoryError"), Failure("syntax", "python", "SyntaxError")]
    note = lessons(failures, network=False, toolkit=False)
    assert note.startswith("Lessons from this user's recent failed runs: numpy, ") and len(note) <= 600
    assert "the network is off" in note
    assert "numpy" not in lessons(failures, network=False, toolkit=True)
    assert lessons([Failure("refused", "python", "no sandbox")], network=False, toolkit=False) == ""
