"""`LocalExecutor`: runs code in a fresh bwrap sandbox per call (or, if the operator allows, unsandboxed)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from core_tools.errors import ToolError
from core_tools.sandbox import watchdog
from core_tools.sandbox.categorize import categorize_error
from core_tools.sandbox.cgroup import RunCgroup, RunParent, die_with_parent, find_run_parent
from core_tools.sandbox.isolation import (
    SANDBOX_PATH,
    SANDBOX_UID,
    Interpreter,
    bwrap_argv,
    drop_privileges,
    enable_hint,
    find_interpreters,
    find_prlimit,
    interpreter_argv,
    limit_wrapper,
    memory_limit_mb,
    probe_bwrap,
    toolkit_interpreter,
)
from core_tools.sandbox.model import (
    ExecutionResult,
    Executor,
    FileLimits,
    Isolation,
    OutputWatcher,
    RunWatcher,
    SandboxLimits,
)
from core_tools.sandbox.workfiles import (
    IN_DIR,
    OUT_DIR,
    collect_dir,
    collect_tar,
    epilogue_argv,
    remove,
    write_inputs,
)

_CHUNK = 65_536
_TAIL_BYTES = 16_384  # end of stderr kept (beyond the cap) only to categorize the error
_DRAIN_GRACE_S = 1.0  # after the process is gone, how long pipes still held by strays may stay open
_REAP_GRACE_S = 5.0  # how long bwrap gets to reap its namespace after its init was killed
_OOM_POLL_S = 0.05  # how often a run's cgroup is checked for an OOM kill (v1 kills one process, not all)
_MIB = 1024 * 1024
_LINE_BYTES = 4096  # the end of an unfinished line kept to find the latest complete one (progress)
_LINE_BREAK = re.compile(rb"[\r\n]")  # \r too: progress bars redraw their line with it
_ALIASES = {
    "py": "python",
    "python3": "python",
    "js": "javascript",
    "node": "javascript",
    "nodejs": "javascript",
}


@dataclass
class _Capture:
    """One output stream: the first `cap` bytes, a short tail, and the total size."""

    cap: int
    head: bytearray = field(default_factory=bytearray)
    tail: bytearray = field(default_factory=bytearray)
    total: int = 0

    def feed(self, chunk: bytes) -> None:
        """Keep what fits under the cap, count everything."""
        self.total += len(chunk)
        room = self.cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
        self.tail += chunk
        if len(self.tail) > _TAIL_BYTES:
            del self.tail[:-_TAIL_BYTES]

    @property
    def truncated(self) -> bool:
        """Whether more was produced than kept."""
        return self.total > len(self.head)

    def text(self) -> str:
        """The kept bytes as text."""
        return self.head.decode("utf-8", errors="replace")

    def text_for_diagnosis(self) -> str:
        """Head and (if cut) tail: error names sit near the top (node) or at the very end (python)."""
        if not self.truncated:
            return self.text()
        return self.text() + "\n" + self.tail.decode("utf-8", errors="replace")


class _LineWatch:
    """Finds the latest complete, non-blank line of one stream and tells `report` (progress of a run)."""

    def __init__(self, report: OutputWatcher) -> None:
        self.report = report
        self.partial = b""  # the end of the line not finished yet, at most _LINE_BYTES

    def feed(self, chunk: bytes) -> None:
        """Look at a chunk: report its last complete line, if it finished one (once per chunk)."""
        data = self.partial + chunk
        end = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if end < 0:
            self.partial = data[-_LINE_BYTES:]
            return
        self.partial = data[end + 1 :][-_LINE_BYTES:]
        lines = [line for line in _LINE_BREAK.split(data[max(0, end - _LINE_BYTES) : end]) if line.strip()]
        if lines:
            self.report(lines[-1].decode("utf-8", errors="replace"))


async def _pump(
    stream: asyncio.StreamReader | None, capture: _Capture, watch: _LineWatch | None = None
) -> None:
    """Read a stream to EOF, keeping at most the cap in memory (and showing `watch` every chunk)."""
    if stream is None:
        return
    while chunk := await stream.read(_CHUNK):
        capture.feed(chunk)
        if watch is not None:
            watch.feed(chunk)


async def _pump_fd(pipe: list[int], capture: _Capture) -> None:
    """Read the read end `pipe[0]` to EOF into `capture`; the fd is closed (and marked -1) afterwards."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    handle = os.fdopen(pipe[0], "rb", buffering=0)
    pipe[0] = -1  # the file object (and the transport) own it now
    transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), handle)
    try:
        await _pump(reader, capture)
    finally:
        transport.close()


async def _feed_stdin(stdin: asyncio.StreamWriter | None, data: bytes) -> None:
    """Write the program to the interpreter's stdin and close it."""
    if stdin is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stdin.write(data)
        await stdin.drain()
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        stdin.close()
        await stdin.wait_closed()


def _kill_group(pid: int) -> None:
    """SIGKILL the child's process group (the child and whatever did not leave its group)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    """Direct children of `pid`, from /proc (the `children` file, else a scan of every stat file)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as handle:
            return [int(p) for p in handle.read().split()]
    except OSError:
        pass
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        with (
            contextlib.suppress(OSError, ValueError, IndexError),
            open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle,
        ):
            if int(handle.read().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry))
    return found


async def _stop(proc: asyncio.subprocess.Process, sandboxed: bool) -> None:
    """Kill everything the run started and reap it before returning.

    In a sandbox we SIGKILL bwrap's pid-namespace init, not bwrap itself: the kernel kills every process
    in the namespace, and bwrap only exits after reaping that init, which in turn cannot finish exiting
    before the namespace is empty. So once `proc.wait()` returns nothing the code started is left (not even
    a zombie). Killing bwrap first would orphan the init instead.

    On a normal exit bwrap leaves as soon as its init reports the program's status; the init then
    exits and the kernel kills whatever is left in the namespace. That window is microseconds (40 runs
    that left a daemonised `sleep` behind found none alive right after `run` returned).
    """
    if proc.returncode is None and sandboxed:
        for child in _children(proc.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(child, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(proc.wait()), _REAP_GRACE_S)
    _kill_group(proc.pid)
    await proc.wait()


class LocalExecutor:
    """Runs each call in its own fresh sandbox on this host."""

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        allow_unsandboxed: bool = False,
        bwrap_path: str | None = None,
        cgroups: bool = True,
        python_env: str | None = None,
    ) -> None:
        """Probe bwrap (once per binary) and find the interpreters; nothing is started yet.

        `cgroups=False` bounds memory with the watchdog even where a cgroup could be made (for tests).
        `python_env`: a separate environment (the data toolkit) whose python3 runs Python code.
        """
        self.limits = limits or SandboxLimits()
        self.allow_unsandboxed = allow_unsandboxed
        self._probe = probe_bwrap(bwrap_path)
        self._bwrap_path = bwrap_path or shutil.which("bwrap") or "bwrap"
        self.isolation_reason = self._probe.reason
        self.isolation: Isolation = self._probe.isolation
        if self.isolation is Isolation.UNAVAILABLE and allow_unsandboxed:
            self.isolation = Isolation.UNSANDBOXED
        self._interpreters = find_interpreters()
        self._system_python = self._interpreters.get("python")
        self.toolkit = False
        self.use_python_env(python_env)
        found: RunParent | str = find_run_parent() if cgroups else "cgroups not used"
        self._run_parent = found if isinstance(found, RunParent) else None
        # Told of every run's process (the sandbox service's guardian, which kills them if we die).
        self.guardian: RunWatcher | None = None
        self.memory_bound = (
            found.label
            if isinstance(found, RunParent)
            else f"watchdog sampling the run's processes and tmpfs ({found})"
        )

    def use_python_env(self, python_env: str | None) -> bool:
        """Run Python with the environment's python3 (the data toolkit) from now on, or, for None or an
        unusable one, the system's; True when the environment is used."""
        toolkit = toolkit_interpreter(python_env, self._system_python) if python_env else None
        self.toolkit = toolkit is not None
        python = toolkit or self._system_python
        if python is not None:
            self._interpreters["python"] = python
        return self.toolkit

    @property
    def run_parent(self) -> RunParent | None:
        """Where each run gets its own cgroup, or None (the watchdog bounds runs)."""
        return self._run_parent

    def languages(self) -> list[str]:
        """The languages this executor can run right now."""
        return [lang for lang in ("python", "javascript") if lang in self._interpreters]

    def _resolve(self, language: str) -> tuple[str, Interpreter]:
        """Canonical language name and its interpreter, or a ToolError naming what is available."""
        name = _ALIASES.get(language.strip().lower(), language.strip().lower())
        interpreter = self._interpreters.get(name)
        if interpreter is None:
            available = ", ".join(self.languages()) or "none"
            raise ToolError(f"language {language!r} is not available; available: {available}")
        return name, interpreter

    def _timeout(self, timeout_s: float | None) -> float:
        """The wall-clock budget of one call: the default, lowered per call, never above the max."""
        wanted = self.limits.timeout_s if timeout_s is None else timeout_s
        if wanted <= 0:
            raise ToolError(f"timeout must be positive, got {timeout_s}")
        return min(wanted, self.limits.max_timeout_s)

    def _refusal(self, language: str) -> ExecutionResult:
        """The result returned instead of running code without isolation."""
        reason = self.isolation_reason
        message = (
            f"code execution refused: no sandbox available ({reason}). To enable: {enable_hint(reason)}."
        )
        return ExecutionResult(
            success=False,
            stdout="",
            stderr=message,
            exit_code=None,
            duration_ms=0,
            error_category=categorize_error(language, message, None, False, refused=True),
            truncated=False,
            stdout_bytes=0,
            stderr_bytes=0,
            isolation=str(Isolation.UNAVAILABLE),
            language=language,
            timed_out=False,
        )

    async def run(
        self,
        code: str,
        language: str = "python",
        timeout_s: float | None = None,
        *,
        files_in: Mapping[str, bytes] | None = None,
        files_out: FileLimits | None = None,
        on_output: OutputWatcher | None = None,
    ) -> ExecutionResult:
        """Run `code` in a fresh sandbox and return what happened (failures of the code are results).

        `files_in` are readable under in/; with `files_out` the files written under out/ come back;
        `on_output` is told each latest complete line of output while the run goes on.
        """
        name, interpreter = self._resolve(language)
        timeout = self._timeout(timeout_s)
        if self.isolation is Isolation.UNAVAILABLE:
            return self._refusal(name)
        sandboxed = self.isolation is Isolation.BWRAP
        if not sandboxed:  # no mounts: the interpreters where they are on the host
            interpreter = interpreter.on_host()
        program = interpreter_argv(name, interpreter, self.limits, code)
        python_interpreter = self._interpreters.get("python", interpreter)
        python = (python_interpreter if sandboxed else python_interpreter.on_host()).path
        wrapper = limit_wrapper(
            self.limits, memory_limit_mb(name, self.limits), find_prlimit(sandboxed), python
        )
        scratch: str | None = None
        in_dir = write_inputs(files_in) if files_in and sandboxed else None
        pipe: list[int] | None = list(os.pipe()) if files_out is not None and sandboxed else None
        cgroup = self._run_cgroup()
        kwargs: dict[str, Any] = dict(drop_privileges())
        if cgroup is not None:
            # The child joins the cgroup before exec, as root, and drops privileges itself afterwards.
            kwargs = {"preexec_fn": cgroup.joiner(SANDBOX_UID if os.geteuid() == 0 else None)}
        else:
            kwargs["preexec_fn"] = die_with_parent(os.getpid())  # after Popen's own user= switch
        if pipe is not None:
            kwargs["pass_fds"] = (pipe[1],)
        if sandboxed:
            work = interpreter.work_files + (((in_dir, IN_DIR),) if in_dir is not None else ())
            argv = bwrap_argv(
                self._bwrap_path,
                self._probe.features,
                self.limits,
                interpreter.binds,
                work,
                pipe is not None,
                interpreter.mounts,
            )
            command = wrapper + program
            if pipe is not None:
                command = epilogue_argv("/bin/bash", OUT_DIR, pipe[1], command)
            argv += command
            cwd = "/"
            env = {"PATH": SANDBOX_PATH}
        else:
            scratch = tempfile.mkdtemp(prefix="code-scratch-")
            if os.geteuid() == 0:
                os.chown(scratch, SANDBOX_UID, SANDBOX_UID)
            argv = wrapper + program
            cwd = scratch
            env = {"PATH": SANDBOX_PATH, "HOME": scratch, "LANG": "C.UTF-8", "TMPDIR": scratch}
            env["MPLBACKEND"] = "Agg"
            self._unsandboxed_files(scratch, files_in, files_out is not None)
        try:
            result, tar, cut = await self._execute(
                argv, cwd, env, kwargs, code, name, timeout, sandboxed, cgroup, pipe, on_output
            )
            # What out/ can really hold: only files of holes (truncate) could claim more, once read.
            scratch_bytes = self.limits.scratch_mb * _MIB
            if result.timed_out:
                pass  # a run killed on the clock hands nothing back (its files may be half written)
            elif files_out is not None and scratch is not None:
                kept, skipped = collect_dir(os.path.join(scratch, OUT_DIR), files_out, scratch_bytes)
                result = replace(result, files_out=kept, files_skipped=skipped)
            elif files_out is not None:
                kept, skipped = collect_tar(tar, files_out, cut=cut, total=scratch_bytes)
                result = replace(result, files_out=kept, files_skipped=skipped)
            return result
        finally:
            if cgroup is not None:
                await cgroup.close()
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
            remove(in_dir)
            for fd in pipe or ():
                if fd >= 0:  # not yet closed by _execute (the start failed)
                    with contextlib.suppress(OSError):
                        os.close(fd)

    @staticmethod
    def _unsandboxed_files(scratch: str, files_in: Mapping[str, bytes] | None, out: bool) -> None:
        """in/ (read-only files) and out/ in an unsandboxed run's scratch directory, when asked for."""
        for sub in ([IN_DIR] if files_in else []) + ([OUT_DIR] if out else []):
            path = os.path.join(scratch, sub)
            os.mkdir(path)
            if os.geteuid() == 0:
                os.chown(path, SANDBOX_UID, SANDBOX_UID)
        for file_name, data in (files_in or {}).items():
            path = os.path.join(scratch, IN_DIR, os.path.basename(file_name))
            with open(path, "wb") as handle:
                handle.write(data)
            os.chmod(path, 0o444)

    def _run_cgroup(self) -> RunCgroup | None:
        """A fresh cgroup for one run, or None (the watchdog bounds the run) when there is none."""
        if self._run_parent is None:
            return None
        try:
            # pids: RLIMIT_NPROC already counts the code's processes; this also counts bwrap's own.
            return RunCgroup(self._run_parent, self.limits.memory_mb * _MIB, self.limits.max_processes + 16)
        except OSError:
            return None  # e.g. the parent was removed under us: this run falls back to the watchdog

    async def _oom_killed(self, cgroup: RunCgroup) -> None:
        """Return once the kernel has OOM-killed a process of the run (cgroup v1 kills one, not all)."""
        # Polling, not an event: the kernel offers no notification that asyncio can wait on portably.
        while True:
            if cgroup.oom_kills() > 0:
                return
            await asyncio.sleep(_OOM_POLL_S)

    async def _execute(
        self,
        argv: list[str],
        cwd: str,
        env: dict[str, str],
        kwargs: dict[str, Any],
        code: str,
        language: str,
        budget_s: float,
        sandboxed: bool,
        cgroup: RunCgroup | None,
        pipe: list[int] | None = None,
        on_output: OutputWatcher | None = None,
    ) -> tuple[ExecutionResult, bytes, bool]:
        """Start the process, stream its output under the caps, enforce the wall clock, reap everything.

        Also returns what came through `pipe` (the tar of out/), at most the size of the working tmpfs, and
        whether more came than that (the head is still returned: the whole files in it are kept).
        """
        out = _Capture(self.limits.output_cap_bytes)
        err = _Capture(self.limits.output_cap_bytes)
        files = _Capture(self.limits.scratch_mb * _MIB + _MIB)
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=cwd,
            env=env,
            close_fds=True,
            start_new_session=True,
            **kwargs,
        )
        if self.guardian is not None:
            self.guardian.started(proc.pid)
        tasks = [
            asyncio.create_task(_feed_stdin(proc.stdin, code.encode("utf-8", errors="replace"))),
            asyncio.create_task(_pump(proc.stdout, out, _LineWatch(on_output) if on_output else None)),
            asyncio.create_task(_pump(proc.stderr, err, _LineWatch(on_output) if on_output else None)),
        ]
        if pipe is not None:
            os.close(pipe[1])  # only the run holds the write end now: EOF comes when it is gone
            pipe[1] = -1
            tasks.append(asyncio.create_task(_pump_fd(pipe, files)))
        timed_out = over_memory = False
        limit = self.limits.memory_mb * _MIB
        # Without a cgroup the watchdog thread samples the run and kills it over the limit by itself.
        guard = watchdog.Watchdog(proc.pid, sandboxed, limit) if cgroup is None else None
        waiter = asyncio.ensure_future(proc.wait())
        watchers: set[asyncio.Future[Any]] = {waiter}
        if cgroup is not None:
            watchers.add(asyncio.ensure_future(self._oom_killed(cgroup)))
        try:
            done, _pending = await asyncio.wait(
                watchers, timeout=budget_s, return_when=asyncio.FIRST_COMPLETED
            )
            if waiter not in done:
                for task in done:
                    task.result()  # a failure of the watcher itself is a bug: raise it
                over_memory = bool(done)
                timed_out = not over_memory
        finally:
            for task in watchers:
                task.cancel()
            if cgroup is not None and over_memory:
                cgroup.kill()
            try:
                await _stop(proc, sandboxed)
            finally:
                if self.guardian is not None:
                    self.guardian.finished(proc.pid)
            await asyncio.gather(*watchers, return_exceptions=True)
            if guard is not None:
                guard.stop()
            # The kernel may have killed a process of the run just before it ended.
            over_memory = (
                over_memory
                or (guard is not None and guard.exceeded)
                or (cgroup is not None and cgroup.oom_kills() > 0)
            )
            # Pipes close once every process holding them is gone; strays get a short grace, then we stop.
            _done, pending = await asyncio.wait(tasks, timeout=_DRAIN_GRACE_S)
            for task in pending:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        duration_ms = int((time.monotonic() - started) * 1000)
        exit_code = None if timed_out or over_memory else proc.returncode
        success = not timed_out and not over_memory and exit_code == 0
        category = (
            None if success else categorize_error(language, err.text_for_diagnosis(), exit_code, timed_out)
        )
        stderr = err.text()
        notes = []
        if over_memory:
            category = "memory"
            notes.append(f"[killed: memory limit of {self.limits.memory_mb} MB for the whole run exceeded]")
        if timed_out:
            notes.append(f"[killed: wall-clock timeout of {budget_s:g} s exceeded]")
        for note in notes:
            stderr = f"{stderr}\n{note}" if stderr else note
        result = ExecutionResult(
            success=success,
            stdout=out.text(),
            stderr=stderr,
            exit_code=exit_code,
            duration_ms=duration_ms,
            error_category=category,
            truncated=out.truncated or err.truncated,
            stdout_bytes=out.total,
            stderr_bytes=err.total,
            isolation=str(self.isolation),
            language=language,
            timed_out=timed_out,
        )
        return result, bytes(files.head), files.truncated


def describe(executor: Executor) -> str:
    """One line for the startup report, e.g. "code sandbox: bwrap (...; memory bound: cgroup v1 ...)"."""
    if isinstance(executor, LocalExecutor):
        limits = executor.limits
        langs = ", ".join(executor.languages())
        if executor.isolation is Isolation.UNAVAILABLE:
            return f"code sandbox: unavailable, code runs are refused ({executor.isolation_reason})"
        network = "on" if limits.network else "off"
        line = f"code sandbox: {executor.isolation} ({langs}; network {network}, "
        line += f"{limits.timeout_s:g} s, {limits.memory_mb} MB; memory bound: {executor.memory_bound})"
        if executor.isolation is Isolation.UNSANDBOXED:
            line += f" WITHOUT isolation: {executor.isolation_reason}"
        return line
    return f"code sandbox: {executor.isolation} ({', '.join(executor.languages())})"
