"""`python -m core_tools.code --json` as a real subprocess: one JSON object out, exit codes 0, 1 and 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from core_tools.sandbox import Isolation, detect_isolation

REPO = Path(__file__).resolve().parents[2]
ISOLATION, REASON = detect_isolation()
needs_bwrap = pytest.mark.skipif(ISOLATION is not Isolation.BWRAP, reason=f"no working bwrap: {REASON}")


def run_json(stdin: str, *args: str) -> tuple[int, dict[str, Any]]:
    """The exit code and the one JSON object the CLI wrote (stdout must be exactly one object)."""
    done = subprocess.run(
        [sys.executable, "-m", "core_tools.code", "--json", *args],
        input=stdin.encode(),
        capture_output=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    obj = json.loads(done.stdout)  # one object, nothing else on stdout
    assert isinstance(obj, dict), done.stdout
    return done.returncode, obj


@needs_bwrap
def test_a_completed_run_exits_0_and_reports_the_programs_success_or_failure() -> None:
    request = {
        "language": "python",
        "code": "print(open('in/data.csv').read().split()[1]); open('out/r.txt', 'w').write('done')",
        "timeout_ms": 10_000,
        "files": {"data.csv": "a,b\n1,2\n"},
    }
    code, obj = run_json(json.dumps(request))
    assert code == 0 and obj["status"] == "completed" and obj["success"] is True
    assert obj["stdout"] == "1,2\n" and obj["isolation"] == "bwrap"
    assert obj["files_out"] == [{"name": "r.txt", "bytes": 4, "base64": "ZG9uZQ=="}]

    code, obj = run_json(json.dumps({"language": "python", "code": "1/0"}))
    assert code == 0 and obj["status"] == "completed" and obj["success"] is False
    assert obj["error_category"] == "runtime" and "ZeroDivisionError" in obj["stderr"]


@pytest.mark.parametrize(
    ("stdin", "says"),
    [
        ('{"language": "python", "code": ', "not JSON"),
        ("[1, 2]", "one JSON object"),
        ('{"language": "python"}', "missing required field(s): code"),
        ('{"code": "print(1)"}', "missing required field(s): language"),
        ('{"language": "python", "code": "print(1)", "timeout_ms": "soon"}', "'timeout_ms' must be"),
        ('{"language": "python", "code": "print(1)", "timeout_ms": 0}', "positive"),
        ('{"language": "python", "code": "print(1)", "stdin": "x"}', "unknown field(s): stdin"),
    ],
)
def test_input_that_cannot_be_parsed_or_misses_a_field_exits_1(stdin: str, says: str) -> None:
    code, obj = run_json(stdin)
    assert code == 1 and obj["status"] == "invalid" and obj["success"] is False
    assert says in obj["error"]


def test_a_bad_command_line_in_json_mode_is_an_object_too() -> None:
    code, obj = run_json('{"language": "python", "code": "print(1)"}', "--timeout", "soon")
    assert code == 1 and obj["status"] == "invalid" and "--timeout" in obj["error"]


@pytest.mark.parametrize(
    ("request_obj", "says"),
    [
        ({"language": "cobol", "code": "DISPLAY 'HI'."}, "language 'cobol' is not available"),
        ({"language": "python", "code": "print(1)", "files": {"../x.txt": "x"}}, "'../x.txt' refused"),
        ({"language": "python", "code": "print(1)", "files": {"/etc/passwd": "x"}}, "refused"),
        ({"language": "python", "code": "print(1)", "files": {"..": "x"}}, "refused"),
    ],
)
def test_a_run_refused_for_security_exits_2(request_obj: dict[str, Any], says: str) -> None:
    code, obj = run_json(json.dumps(request_obj))
    assert code == 2 and obj["status"] == "refused" and obj["success"] is False
    assert says in obj["error"]


def test_no_sandbox_means_refused_with_exit_2() -> None:
    request = json.dumps({"language": "python", "code": "print(1)"})
    code, obj = run_json(request, "--bwrap", "/nonexistent/bwrap")
    assert code == 2 and obj["status"] == "refused" and "no sandbox available" in obj["error"]
    assert obj["isolation"] == "unavailable"


def test_the_plain_mode_is_unchanged() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "core_tools.code", "--language", "cobol"],
        input=b"print(1)",
        capture_output=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2 and done.stdout == b"" and b"not available" in done.stderr


def run_raw(stdin: bytes, *args: str | bytes) -> tuple[int, dict[str, Any], bytes]:
    """Exit code, the one JSON object on stdout (nothing else there) and stderr."""
    done = subprocess.run(
        [sys.executable, "-m", "core_tools.code", "--json", *args],
        input=stdin,
        capture_output=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    lines = done.stdout.decode("utf-8").splitlines()
    assert len(lines) == 1, done.stdout
    obj = json.loads(lines[0])
    assert isinstance(obj, dict), done.stdout
    return done.returncode, obj, done.stderr


PROGRAM = '"language": "python", "code": "print(1)"'


@pytest.mark.parametrize(
    ("stdin", "says"),
    [
        # Python's JSON decoder raises RecursionError past about 1,000 levels.
        ("{" + PROGRAM + ', "files": ' + "[" * 5000 + "]" * 5000 + "}", "nested too deeply"),
        ("[" * 5000 + "]" * 5000, "nested too deeply"),
        # Past the int-string limit (4,300 digits) int() raises ValueError.
        ("{" + PROGRAM + ', "timeout_ms": ' + "9" * 5000 + "}", "more than 4300 digits"),
        # 10**400 ms does not fit a float: the division raised OverflowError.
        ("{" + PROGRAM + ', "timeout_ms": 1' + "0" * 400 + "}", "'timeout_ms' is too large"),
        # A lone surrogate cannot be encoded as UTF-8 (for the file, or for the answer).
        ("{" + PROGRAM + ', "files": {"\\ud800.txt": "x"}}', "a file name is not text: a lone surrogate"),
        ("{" + PROGRAM + ', "files": {"a.txt": "x\\udfff"}}', "file 'a.txt' is not text: a lone surrogate"),
        ('{"language": "python", "code": "print(\'\\ud800\')"}', "field 'code' is not text"),
        ('{"language": "py\\ud800", "code": "print(1)"}', "field 'language' is not text"),
        ("{" + PROGRAM + ', "\\ud800": 1}', "unknown field(s): \\ud800;"),
        ("{" + PROGRAM + ', "timeout_ms": 1e400}', "'timeout_ms' must be a JSON integer"),
        ('{"language": "python", "code": "print(1)"', "not JSON"),
        ('"just a string"', "one JSON object"),
        ("null", "one JSON object"),
        ("", "not JSON"),
    ],
    ids=[
        "nested-5000-in-field",
        "nested-5000-top",
        "5000-digit-integer",
        "timeout-10e400",
        "surrogate-file-name",
        "surrogate-file-content",
        "surrogate-code",
        "surrogate-language",
        "surrogate-field-name",
        "timeout-infinite-float",
        "truncated-json",
        "string-top-level",
        "null-top-level",
        "empty-input",
    ],
)
def test_hostile_input_is_one_invalid_object_and_exit_1_never_a_traceback(stdin: str, says: str) -> None:
    code, obj, stderr = run_raw(stdin.encode("ascii"), "--bwrap", "/nonexistent/bwrap")
    assert code == 1 and obj["status"] == "invalid" and obj["success"] is False
    assert says in obj["error"]
    assert b"Traceback" not in stderr and stderr == b""


def test_a_bad_argument_that_is_not_utf8_is_one_object_too() -> None:
    request = ("{" + PROGRAM + "}").encode()
    code, obj, stderr = run_raw(request, "--bogus", b"\xff")
    assert code == 1 and obj["status"] == "invalid" and "--bogus" in obj["error"]
    assert b"Traceback" not in stderr
