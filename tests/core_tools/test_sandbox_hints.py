"""When bwrap cannot isolate, the probe and the refusal name the real cause and its fix.

The failures are real: bwrap runs under a seccomp filter (installed with prctl, as Docker's profile is)
that answers EPERM to one system call, so the text checked is bwrap's own error output.
"""

from __future__ import annotations

import os
import platform
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from core_tools.sandbox import Isolation, LocalExecutor, SandboxLimits, detect_isolation
from core_tools.sandbox.isolation import diagnose, in_container

ISOLATION, REASON = detect_isolation()
BWRAP = shutil.which("bwrap")
SYSTEM_PYTHON = "/usr/bin/python3"  # the wrapper runs as uid 65534, which cannot read a venv under /root

# x86_64 syscall numbers; the wrapper lets everything else through.
DENY = """#!{python}
import ctypes, os, struct, sys
prog = [(0x20, 0, 0, 4), (0x15, 0, 3, 0xC000003E), (0x20, 0, 0, 0), (0x15, 0, 1, {nr}),
        (0x06, 0, 0, 0x00050001), (0x06, 0, 0, 0x7FFF0000)]  # arch? nr? -> ERRNO(EPERM) : ALLOW
code = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *op) for op in prog))
class FProg(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
fprog = FProg(len(prog), ctypes.addressof(code))
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
assert libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) == 0  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
os.execv({bwrap!r}, ["bwrap", *sys.argv[1:]])
"""
CALLS = {"sethostname": 170, "mount": 165, "pivot_root": 155, "clone": 56}


@pytest.fixture
def wrappers() -> Iterator[Path]:
    if ISOLATION is not Isolation.BWRAP or BWRAP is None:
        pytest.skip(f"no working bwrap: {REASON}")
    if platform.machine() != "x86_64" or not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip("the seccomp wrapper is written for x86_64 and a system python3")
    folder = Path(tempfile.mkdtemp(prefix="bwrap-deny-", dir="/tmp"))  # readable by uid 65534
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder)


def _denying(folder: Path, call: str) -> str:
    """A bwrap that runs under a seccomp filter refusing `call` with EPERM."""
    path = folder / f"bwrap-deny-{call}"
    path.write_text(DENY.format(python=SYSTEM_PYTHON, nr=CALLS[call], bwrap=BWRAP))
    path.chmod(0o755 | stat.S_IXUSR)
    return str(path)


@pytest.mark.parametrize(
    ("call", "line"),
    [
        ("sethostname", "Can't set hostname to sandbox: Operation not permitted"),
        ("mount", "Failed to make / slave: Operation not permitted"),
        ("pivot_root", "pivot_root: Operation not permitted"),
    ],
)
async def test_a_blocked_call_is_named_with_the_seccomp_fix(wrappers: Path, call: str, line: str) -> None:
    executor = LocalExecutor(SandboxLimits(), bwrap_path=_denying(wrappers, call))
    assert executor.isolation is Isolation.UNAVAILABLE
    assert line in executor.isolation_reason  # bwrap's own words
    result = await executor.run("print(1)")
    assert result.error_category == "refused"
    assert (
        f"seccomp profile blocks {call}" in result.stderr or f"seccomp filter blocks {call}" in result.stderr
    )
    assert "sysctl" not in result.stderr and "user namespaces" not in result.stderr
    if in_container():
        assert "deploy/seccomp-bwrap.json" in result.stderr
    assert "CODE_ALLOW_UNSANDBOXED=true" in result.stderr


async def test_blocked_namespaces_point_at_seccomp_in_a_container(wrappers: Path) -> None:
    executor = LocalExecutor(SandboxLimits(), bwrap_path=_denying(wrappers, "clone"))
    assert "No permissions to create new namespace" in executor.isolation_reason
    result = await executor.run("print(1)")
    # Docker's default profile refuses namespace flags to clone/unshare: the same EPERM a sysctl gives.
    if in_container():
        assert "deploy/seccomp-bwrap.json" in result.stderr and "seccomp profile blocks" in result.stderr
    else:
        assert "kernel.unprivileged_userns_clone=1" in result.stderr


async def test_missing_bwrap_says_install_bubblewrap() -> None:
    result = await LocalExecutor(SandboxLimits(), bwrap_path="/nonexistent/bwrap").run("print(1)")
    assert "install bubblewrap (apt install bubblewrap)" in result.stderr
    assert "seccomp" not in result.stderr and "sysctl" not in result.stderr


# Lines bwrap 0.8 prints (recorded from the binary and from the runs above), mapped either way.
@pytest.mark.parametrize(
    ("line", "container", "cause", "fix"),
    [
        (
            "bwrap: Can't set hostname to sandbox: Operation not permitted",
            True,
            "seccomp profile blocks sethostname",
            "deploy/seccomp-bwrap.json",
        ),
        (
            "bwrap: Can't set hostname to sandbox: Operation not permitted",
            False,
            "seccomp filter blocks sethostname",
            "without that seccomp filter",
        ),
        (
            "bwrap: unshare user ns: Operation not permitted",
            True,
            "seccomp profile blocks unshare",
            "deploy/seccomp-bwrap.json",
        ),
        (
            "bwrap: No permissions to create new namespace, likely because the kernel does not allow "
            "non-privileged user namespaces.",
            False,
            "user namespaces are disabled",
            "kernel.unprivileged_userns_clone=1",
        ),
        (
            "bwrap: Can't mount proc on /newroot/proc: Operation not permitted",
            True,
            "masks parts of /proc",
            "systempaths=unconfined",
        ),
        ("bwrap: Failed to make / slave: Permission denied", True, "AppArmor", "apparmor=unconfined"),
        (
            "bwrap: setting up uid map: Permission denied",
            False,
            "security module",
            "apparmor_restrict_unprivileged_userns=0",
        ),
        (
            "bwrap: Creating new namespace failed, likely because the kernel does not support user "
            "namespaces.  bwrap must be installed setuid on such systems.",
            False,
            "no user namespaces",
            "setuid bwrap",
        ),
        ("bwrap not found (not on PATH)", True, "not installed", "apt install bubblewrap"),
    ],
)
def test_diagnose_recorded_lines(line: str, container: bool, cause: str, fix: str) -> None:
    found_cause, found_fix = diagnose(line, container)
    assert cause in found_cause and fix in found_fix
    assert "CODE_ALLOW_UNSANDBOXED=true" in found_fix
