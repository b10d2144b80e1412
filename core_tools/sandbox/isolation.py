"""Finding interpreters, building the bwrap command line and probing whether bwrap works here.

Why the sandbox drops to an unprivileged uid when the bot runs as root: RLIMIT_NPROC is not enforced for
processes whose real uid is host root, and `bwrap --unshare-user --uid 65534` still maps that uid to host
root, so a fork bomb measured 10,000 live processes that way. Started as uid 65534 instead, the same bomb
stops at the limit. The limits themselves are set by `prlimit` *inside* the new user namespace, where the
process count starts at zero, so each run gets its own `max_processes` no matter how many others run.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import sys
import threading
from concurrent.futures import Future
from dataclasses import dataclass, replace
from pathlib import Path

from core_tools.sandbox.model import Isolation, SandboxLimits

SANDBOX_UID = 65534  # "nobody": what the code runs as, inside and (when the bot is root) outside
SCRATCH_DIR = "/scratch"
TOOLKIT_MOUNT = "/opt/sandbox-python"  # where every run sees the data toolkit (CODE_PYTHON_ENV)
SANDBOX_PATH = "/usr/local/bin:/usr/bin:/bin"
NODE_VM_OVERHEAD_MB = 1024  # V8 reserves address space up front; node does not start under ~800 MB of AS
_UNSANDBOXED_HINT = "or set the operator setting CODE_ALLOW_UNSANDBOXED=true to run code without isolation"
ENABLE_HINT = (
    "install bubblewrap (apt install bubblewrap) and allow unprivileged user namespaces, " + _UNSANDBOXED_HINT
)
_USERNS_SYSCTL = (
    "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1 on Debian, "
    "kernel.apparmor_restrict_unprivileged_userns=0 on Ubuntu 24.04+, user.max_user_namespaces above 0)"
)
_SECCOMP_PROFILE = "run the sandbox service with deploy/seccomp-bwrap.json (see deploy/README.md)"
# Which system call a bwrap error line is about (bwrap 0.8's own wording).
_CALLS = (
    ("hostname", "sethostname"),
    ("pivot_root", "pivot_root"),
    ("Creating new namespace", "unshare"),
    ("unshare", "unshare"),
    ("mount", "mount"),
    ("slave", "mount"),
    ("capset", "capset"),
    ("prctl", "prctl"),
    ("uid map", "uid mapping"),
)

# Directories never bound into the sandbox, even as an interpreter's prefix.
_FORBIDDEN = ("/", "/root", "/home", "/work", "/etc", "/var", "/tmp", "/proc", "/sys", "/dev", "/run")  # noqa: S108
_ROOT_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_ETC_ALWAYS = (
    "ld.so.cache",
    "ld.so.conf",
    "alternatives",
    "localtime",
    "ssl/certs",
    "ssl/openssl.cnf",
    "fonts",  # fontconfig's configuration, for charts
)
_ETC_NETWORK = ("resolv.conf", "hosts", "nsswitch.conf", "gai.conf", "host.conf", "services", "protocols")


@dataclass(frozen=True)
class Interpreter:
    """An interpreter binary and the extra read-only directories it needs inside the sandbox."""

    path: str
    binds: tuple[str, ...] = ()
    # (host file, path under the working directory): read-only files it wants there (a prebuilt cache)
    work_files: tuple[tuple[str, str], ...] = ()
    # (host directory, path inside): read-only directories shown somewhere else than on the host
    mounts: tuple[tuple[str, str], ...] = ()

    def on_host(self) -> Interpreter:
        """The same interpreter run outside a sandbox: its path as the host has it."""
        for host, inside in self.mounts:
            if self.path == inside or self.path.startswith(inside + "/"):
                return replace(self, path=host + self.path[len(inside) :], mounts=())
        return self


def hidden_from_runs(path: Path) -> str | None:
    """Why a directory could not be shown to code runs (as the data toolkit, at TOOLKIT_MOUNT), or None.

    Where it lives on the host does not matter otherwise (under /tmp, or in a home that only root may
    enter: the bot then keeps the toolkit in a place bwrap can enter, see `closed_to_runs`): it is mounted
    at a fixed place of its own inside every run. The bot's own files, home and system directories are
    never shown at all."""
    resolved = path.resolve()
    if not _is_safe_prefix(resolved):
        return (
            f"{resolved} is not a directory of its own (a system directory, the bot's folder or one above "
            "it, the home directory or the bot's environment), which the sandbox never shows"
        )
    return None


def _umask() -> int:
    """This process's umask, read without changing it (Linux 4.7+; else the common 022)."""
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    return 0o022


def closed_to_runs(path: Path) -> tuple[Path, int] | None:
    """The first directory on the way to `path` (itself included) that bwrap cannot enter, and its mode;
    None when every one can be entered.

    Started by root, bwrap runs as SANDBOX_UID (see the module's note) and looks a bind's source up on the
    host as that uid, so a directory it may not search (a 0700 home, a `mktemp -d`) hides everything below
    it; an open descriptor does not help (bwrap resolves `--bind-fd` to its path too). Started by anyone
    else, bwrap looks up as that user, who reaches what the bot reaches. A part that does not exist yet
    counts as made with this process's umask (`mkdir -p`)."""
    if os.geteuid() != 0:
        return None
    umask = _umask()
    resolved = path.resolve()
    for part in [*reversed(resolved.parents), resolved]:
        try:
            st = os.stat(part)
        except FileNotFoundError:
            mode = 0o777 & ~umask
            return (part, mode) if not mode & stat.S_IXOTH else None
        except OSError:
            return part, 0
        if st.st_uid == SANDBOX_UID:
            bit = stat.S_IXUSR
        elif st.st_gid == SANDBOX_UID:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return part, stat.S_IMODE(st.st_mode)
    return None


def _is_safe_prefix(prefix: Path) -> bool:
    """Whether binding `prefix` read-only could not expose the bot's files, home or the repo."""
    resolved = prefix.resolve()
    if str(resolved) in _FORBIDDEN or len(resolved.parts) < 3:
        return False
    protected = [Path.cwd().resolve(), Path.home().resolve(), Path(sys.prefix).resolve()]
    return not any(p == resolved or resolved in p.parents for p in protected)


def _interpreter(candidates: tuple[str, ...], fallback: str | None) -> Interpreter | None:
    """The first system interpreter in `candidates`, else `fallback` with its prefix bound read-only."""
    for candidate in candidates:
        if os.access(candidate, os.X_OK):
            return Interpreter(candidate)
    if fallback is None or not os.access(fallback, os.X_OK):
        return None
    real = Path(fallback).resolve()
    if real.is_relative_to("/usr"):
        return Interpreter(str(real))
    prefix = real.parent.parent  # <prefix>/bin/<binary>
    return Interpreter(str(real), (str(prefix),)) if _is_safe_prefix(prefix) else None


def find_interpreters() -> dict[str, Interpreter]:
    """Interpreters by language: python always (if any usable), javascript when node exists."""
    found: dict[str, Interpreter] = {}
    base_python = str(Path(sys.base_prefix) / "bin" / "python3")
    python = _interpreter(("/usr/bin/python3", "/usr/local/bin/python3"), base_python)
    if python is not None:
        found["python"] = python
    node = _interpreter(("/usr/bin/node", "/usr/local/bin/node"), shutil.which("node"))
    if node is not None:
        found["javascript"] = node
    return found


def toolkit_interpreter(env: str, base: Interpreter | None = None) -> Interpreter | None:
    """The python3 of a separate environment (the data toolkit), bound read-only; None when unusable.

    `base` is the interpreter the environment was made from (its binds are needed too when it does not
    live under /usr)."""
    root = Path(env)
    python = root / "bin" / "python3"
    if not (root / "pyvenv.cfg").is_file() or not os.access(python, os.X_OK):
        return None
    resolved = root.resolve()
    # Never the bot's own environment or anything around the repo: only a directory of its own.
    if not _is_safe_prefix(resolved):
        return None
    # matplotlib's font list, built at install time: without it every run would rebuild it (most of a
    # second). Bound as a file into the writable ~/.cache/matplotlib, so matplotlib still finds it writable.
    cache = resolved / "mpl-cache"
    files = tuple(
        (str(p), f".cache/matplotlib/{p.name}") for p in sorted(cache.glob("*.json")) if p.is_file()
    )
    # Shown at TOOLKIT_MOUNT whatever its place on the host: a place under /tmp (which every run replaces)
    # works. bwrap must still be able to enter every directory above it (`closed_to_runs`: the toolkit
    # keeps itself elsewhere when it cannot). Its python3 links to the base interpreter, whose own binds
    # come along.
    binds = base.binds if base is not None else ()
    return Interpreter(f"{TOOLKIT_MOUNT}/bin/python3", binds, files, ((str(resolved), TOOLKIT_MOUNT),))


def interpreter_argv(
    language: str, interpreter: Interpreter, limits: SandboxLimits, module: bool = False
) -> list[str]:
    """The command that reads the program from stdin: no file is written for it anywhere.

    It depends on the program only through `module` (JavaScript with ES module syntax), so an interpreter
    can be started before its program is known: it reads and runs what comes on its stdin."""
    if language == "javascript":
        argv = [interpreter.path, f"--max-old-space-size={limits.memory_mb}"]
        if module:
            argv.append("--input-type=module")
        return [*argv, "-"]
    return [interpreter.path, "-I", "-u", "-"]


def looks_like_module(code: str) -> bool:
    """Whether JavaScript source uses ES module syntax (`import ... from`, `export`, top-level await)."""
    return bool(re.search(r"^\s*(import\s*[\w{*'\"]|export\s|await\s)", code, re.M))


def memory_limit_mb(language: str, limits: SandboxLimits) -> int:
    """RLIMIT_AS for a language: node needs room for V8's reservations on top of its heap cap."""
    return limits.memory_mb + (NODE_VM_OVERHEAD_MB if language == "javascript" else 0)


def limit_wrapper(limits: SandboxLimits, memory_mb: int, prlimit: str | None, python: str) -> list[str]:
    """A command prefix that sets every rlimit (soft = hard) and then execs the interpreter."""
    values = {
        "cpu": limits.cpu_s,
        "as": memory_mb * 1024 * 1024,
        "nproc": limits.max_processes,
        "fsize": limits.file_size_mb * 1024 * 1024,
        "nofile": limits.open_files,
        "core": 0,
    }
    if prlimit is not None:
        return [prlimit, *(f"--{name}={value}" for name, value in values.items()), "--"]
    names = {"as": "AS"}
    sets = ";".join(f"r.setrlimit(r.RLIMIT_{names.get(k, k.upper())},({v},{v}))" for k, v in values.items())
    launcher = f"import resource as r,os,sys;{sets};os.execv(sys.argv[1],sys.argv[1:])"
    return [python, "-I", "-S", "-c", launcher]


def find_prlimit(sandboxed: bool) -> str | None:
    """util-linux `prlimit`, which must live under /usr to be visible inside the sandbox."""
    for candidate in ("/usr/bin/prlimit", "/bin/prlimit"):
        if os.access(candidate, os.X_OK):
            return candidate
    return None if sandboxed else shutil.which("prlimit")


@dataclass(frozen=True)
class BwrapFeatures:
    """What the installed bwrap supports (older releases lack some options)."""

    tmpfs_size: bool = False
    disable_userns: bool = False


def bwrap_argv(
    bwrap: str,
    features: BwrapFeatures,
    limits: SandboxLimits,
    binds: tuple[str, ...],
    work_binds: tuple[tuple[str, str], ...] = (),
    out_dir: bool = False,
    mounts: tuple[tuple[str, str], ...] = (),
) -> list[str]:
    """bwrap options for one fresh sandbox; the command to run inside follows them.

    `work_binds` are (host directory, path) pairs mounted read-only inside the working directory (in/);
    `out_dir` makes an empty out/ there, for the files that go to the chat.
    """
    argv = [bwrap, "--unshare-all", "--unshare-user"]
    if limits.network:
        argv.append("--share-net")
    argv += ["--die-with-parent", "--new-session", "--clearenv", "--hostname", "sandbox"]
    env = {"PATH": SANDBOX_PATH, "HOME": SCRATCH_DIR, "LANG": "C.UTF-8", "TMPDIR": "/tmp", "USER": "sandbox"}  # noqa: S108
    env["MPLBACKEND"] = "Agg"  # matplotlib of the data toolkit: draw to files, never look for a display
    for key, value in env.items():
        argv += ["--setenv", key, value]
    argv += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_UID)]
    argv += ["--ro-bind", "/usr", "/usr"]
    for name in _ROOT_LINKS:
        path = Path("/") / name
        if path.is_symlink():
            argv += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            argv += ["--ro-bind", str(path), str(path)]
    etc = _ETC_ALWAYS + (_ETC_NETWORK if limits.network else ())
    for name in etc:
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for path_ in binds:
        argv += ["--ro-bind", path_, path_]
    for host, inside in mounts:
        argv += ["--ro-bind", host, inside]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    # Every writable tmpfs gets a size; /dev itself (a tmpfs bwrap fills with device nodes) goes
    # read-only once /dev/shm has its own mount. Writes to device nodes still work on a read-only /dev.
    for mount in (SCRATCH_DIR, "/tmp", "/dev/shm"):  # noqa: S108 - the sandbox's own private tmpfs
        if features.tmpfs_size:
            argv += ["--size", str(limits.scratch_mb * 1024 * 1024)]
        argv += ["--tmpfs", mount]
    if out_dir:  # there from the start: a program writes out/chart.png without making out/ first
        argv += ["--dir", f"{SCRATCH_DIR}/out"]
    for host, inside in work_binds:
        argv += ["--ro-bind", host, f"{SCRATCH_DIR}/{inside}"]
    argv += ["--remount-ro", "/dev", "--remount-ro", "/", "--chdir", SCRATCH_DIR]
    if features.disable_userns:
        argv.append("--disable-userns")
    return argv


def drop_privileges() -> dict[str, object]:
    """Popen arguments that start the child as SANDBOX_UID when we are root (else nothing to drop)."""
    if os.geteuid() != 0:
        return {}
    return {"user": SANDBOX_UID, "group": SANDBOX_UID, "extra_groups": []}


def in_container() -> bool:
    """Whether this process runs in a Docker/Podman/Kubernetes container (where seccomp profiles apply)."""
    if os.path.exists("/.dockerenv") or os.path.exists("/run/.containerenv"):
        return True
    try:
        text = Path("/proc/1/cgroup").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return bool(re.search(r"docker|kubepods|containerd|libpod|/lxc", text))


def diagnose(text: str, container: bool) -> tuple[str, str]:
    """(cause, fix) for why bwrap cannot isolate, from its error output or a probe reason."""
    if "bwrap not found" in text:
        return (
            "bubblewrap is not installed",
            f"install bubblewrap (apt install bubblewrap), {_UNSANDBOXED_HINT}",
        )
    if "does not support user namespaces" in text:
        return (
            "the kernel has no user namespaces",
            f"use a kernel with user namespaces or a setuid bwrap, {_UNSANDBOXED_HINT}",
        )
    if "No permissions to create new namespace" in text:
        if container:
            # Docker's default seccomp profile answers EPERM to unshare/clone with namespace flags.
            return (
                "the container's seccomp profile blocks unshare/clone of new namespaces",
                f"{_SECCOMP_PROFILE}; if it already does, the host must {_USERNS_SYSCTL}, "
                + _UNSANDBOXED_HINT,
            )
        return "unprivileged user namespaces are disabled", f"{_USERNS_SYSCTL}, {_UNSANDBOXED_HINT}"
    call = next((name for key, name in _CALLS if key in text), "a system call bwrap needs")
    if "Can't mount proc" in text and container:
        return (
            "the container masks parts of /proc, so bwrap cannot mount a fresh one",
            "run the sandbox service with security_opt systempaths=unconfined (see deploy/README.md), "
            + _UNSANDBOXED_HINT,
        )
    if "Operation not permitted" in text and call != "a system call bwrap needs":
        # bwrap holds every capability in its own user namespace: EPERM here is a seccomp filter's answer.
        if container:
            return (
                f"the container's seccomp profile blocks {call}",
                f"{_SECCOMP_PROFILE}, {_UNSANDBOXED_HINT}",
            )
        return (
            f"a seccomp filter blocks {call} for bwrap",
            f"run the bot without that seccomp filter, {_UNSANDBOXED_HINT}",
        )
    if "Permission denied" in text and call in ("mount", "uid mapping"):
        if container:
            return (
                f"a security module (AppArmor docker-default) denies {call}",
                "run the sandbox service with security_opt apparmor=unconfined (see deploy/README.md), "
                + _UNSANDBOXED_HINT,
            )
        return (
            f"a security module denies bwrap's {call} in its user namespace",
            f"{_USERNS_SYSCTL}, {_UNSANDBOXED_HINT}",
        )
    return "bwrap cannot create its sandbox here", ENABLE_HINT


def enable_hint(reason: str) -> str:
    """What the operator can do about a probe reason (a line of bwrap's own error output inside it)."""
    return diagnose(reason, in_container())[1]


@dataclass(frozen=True)
class Probe:
    """The outcome of probing one bwrap binary."""

    isolation: Isolation
    reason: str
    features: BwrapFeatures = BwrapFeatures()


_PROBES: dict[str, Probe] = {}
_PENDING: dict[str, Future[Probe]] = {}  # probes started ahead (`probe_bwrap_soon`), by binary
_PENDING_LOCK = threading.Lock()


def probe_bwrap(bwrap_path: str | None = None, *, refresh: bool = False) -> Probe:
    """Run bwrap once with a trivial program exactly as real runs do; the answer is cached per binary (a
    probe started ahead is waited for)."""
    path = bwrap_path if bwrap_path is not None else shutil.which("bwrap")
    key = path or ""
    if not refresh and key in _PROBES:
        return _PROBES[key]
    with _PENDING_LOCK:
        pending = None if refresh else _PENDING.get(key)
    probe = pending.result() if pending is not None else _probe(path)
    _PROBES[key] = probe
    return probe


def probe_bwrap_soon(bwrap_path: str | None = None) -> None:
    """Start the probe of `probe_bwrap` now, in a thread: it waits 0.1-0.3 s for bwrap and a sandboxed
    python3, which a process starting up spends importing instead; `probe_bwrap` takes its answer."""
    path = bwrap_path if bwrap_path is not None else shutil.which("bwrap")
    key = path or ""
    with _PENDING_LOCK:
        if key in _PROBES or key in _PENDING:
            return
        future: Future[Probe] = Future()
        _PENDING[key] = future

    def run() -> None:
        try:
            future.set_result(_probe(path))
        except BaseException as exc:  # probe_bwrap raises it where the answer is asked for
            future.set_exception(exc)

    threading.Thread(target=run, name="bwrap-probe", daemon=True).start()


def _probe(path: str | None) -> Probe:
    """Uncached probe: find bwrap, read its features, run `python3 -c print` inside it."""
    if path is None or not os.access(path, os.X_OK):
        return Probe(Isolation.UNAVAILABLE, f"bwrap not found ({path or 'not on PATH'})")
    python = find_interpreters().get("python")
    if python is None:
        return Probe(Isolation.UNAVAILABLE, "no python3 interpreter usable inside a sandbox")
    try:
        helptext = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=10, check=False)
        features = BwrapFeatures("--size" in helptext.stdout, "--disable-userns" in helptext.stdout)
        limits = SandboxLimits()
        prlimit = find_prlimit(sandboxed=True)
        argv = bwrap_argv(path, features, limits, python.binds)
        argv += limit_wrapper(limits, limits.memory_mb, prlimit, python.path)
        argv += [python.path, "-I", "-S", "-c", "print('sandbox-ok')"]
        done = subprocess.run(  # type: ignore[call-overload]
            argv,
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
            stdin=subprocess.DEVNULL,
            cwd="/",
            env={"PATH": SANDBOX_PATH},
            **drop_privileges(),
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return Probe(Isolation.UNAVAILABLE, f"bwrap at {path} could not run: {exc}")
    if done.returncode != 0 or done.stdout.strip() != "sandbox-ok":
        detail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        cause = diagnose(detail[0], in_container())[0]
        return Probe(Isolation.UNAVAILABLE, f"bwrap at {path} failed its probe: {detail[0]} ({cause})")
    uid_note = f", code runs as uid {SANDBOX_UID}" if os.geteuid() == 0 else ""
    return Probe(Isolation.BWRAP, f"bwrap at {path} works{uid_note}", features)


def detect_isolation(bwrap_path: str | None = None, *, refresh: bool = False) -> tuple[Isolation, str]:
    """The isolation level bwrap gives here and a human-readable reason; probed once per binary."""
    probe = probe_bwrap(bwrap_path, refresh=refresh)
    return probe.isolation, probe.reason
