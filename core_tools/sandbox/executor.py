"""`LocalExecutor`: runs code in a fresh bwrap sandbox per call (or, if the operator allows, unsandboxed).

Each run's sandbox is started by `launch.py`: in the run's own cgroup from its first page, and, when
`ahead` asks for it, before the run comes (the interpreter then waits for its program on stdin).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import core_tools.sandbox.watchdog as watchdog
from core_tools.errors import ToolError
from core_tools.sandbox.categorize import categorize_error
from core_tools.sandbox.cgroup import REMOVER, RunCgroup, RunParent, find_run_parent
from core_tools.sandbox.isolation import (
    SANDBOX_PATH,
    SANDBOX_UID,
    Interpreter,
    bwrap_argv,
    enable_hint,
    find_interpreters,
    find_prlimit,
    interpreter_argv,
    limit_wrapper,
    looks_like_module,
    memory_limit_mb,
    probe_bwrap,
    toolkit_interpreter,
)
from core_tools.sandbox.launch import Ahead, Launched, Shape, spawn, stop
from core_tools.sandbox.model import (
    ExecutionResult,
    Executor,
    FileLimits,
    Isolation,
    OutputWatcher,
    RunWatcher,
    SandboxLimits,
)
from core_tools.sandbox.streams import Capture, LineWatch, feed_stdin, pump, pump_fd
from core_tools.sandbox.workfiles import (
    IN_DIR,
    OUT_DIR,
    collect_dir,
    collect_tar,
    epilogue_argv,
    input_dir,
    remove,
    write_inputs,
)

_DRAIN_GRACE_S = 1.0  # after the process is gone, how long pipes still held by strays may stay open
_OOM_POLL_S = 0.05  # how often a run's cgroup is checked for an OOM kill (v1 kills one process, not all)
_MIB = 1024 * 1024
_ALIASES = {
    "py": "python",
    "python3": "python",
    "js": "javascript",
    "node": "javascript",
    "nodejs": "javascript",
}


class LocalExecutor:
    """Runs each call in its own fresh sandbox on this host."""

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        allow_unsandboxed: bool = False,
        bwrap_path: str | None = None,
        cgroups: bool = True,
        python_env: str | None = None,
        ahead: int = 0,
    ) -> None:
        """Probe bwrap (once per binary) and find the interpreters; nothing is started yet.

        `cgroups=False` bounds memory with the watchdog even where a cgroup could be made (for tests).
        `python_env`: a separate environment (the data toolkit) whose python3 runs Python code.
        `ahead`: sandboxes kept started, waiting for their program, for each kind of run used lately (see
        launch.py); 0 starts each run's sandbox when the run comes. With more than 0, `aclose` removes them.
        """
        self.limits = limits or SandboxLimits()
        self.allow_unsandboxed = allow_unsandboxed
        self._probe = probe_bwrap(bwrap_path)
        self._bwrap_path = bwrap_path or shutil.which("bwrap") or "bwrap"
        self.isolation_reason = self._probe.reason
        self.isolation: Isolation = self._probe.isolation
        if self.isolation is Isolation.UNAVAILABLE and allow_unsandboxed:
            self.isolation = Isolation.UNSANDBOXED
        self.ahead = ahead if self.isolation is Isolation.BWRAP else 0
        self._ahead = Ahead(self._launch, self._discard, self.ahead)
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
        self._ahead.drop(lambda shape: shape.interpreter not in self._interpreters.values())
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
        shape = self._shape(name, interpreter, code, files_in, files_out)
        launched = await self._ahead.take(shape)
        try:
            # Before the program is sent: until then the interpreter only waits for it.
            if launched.in_dir is not None and files_in:
                write_inputs(launched.in_dir, files_in)
            if launched.scratch is not None and files_in:
                write_inputs(os.path.join(launched.scratch, IN_DIR), files_in, mode=0o444)
        except BaseException:
            await self._discard(launched)  # e.g. a full disk: the waiting sandbox goes, the run fails
            raise
        try:
            result, tar, cut = await self._execute(launched, code, name, timeout, on_output)
            # What out/ can really hold: only files of holes (truncate) could claim more, once read.
            scratch_bytes = self.limits.scratch_mb * _MIB
            if result.timed_out:
                pass  # a run killed on the clock hands nothing back (its files may be half written)
            elif files_out is not None and launched.scratch is not None:
                kept, skipped = collect_dir(os.path.join(launched.scratch, OUT_DIR), files_out, scratch_bytes)
                result = replace(result, files_out=kept, files_skipped=skipped)
            elif files_out is not None:
                kept, skipped = collect_tar(tar, files_out, cut=cut, total=scratch_bytes)
                result = replace(result, files_out=kept, files_skipped=skipped)
            return result
        finally:
            self._release(launched)

    def _shape(
        self,
        language: str,
        interpreter: Interpreter,
        code: str,
        files_in: Mapping[str, bytes] | None,
        files_out: FileLimits | None,
    ) -> Shape:
        """What the run's sandbox is started for."""
        return Shape(
            language,
            interpreter,
            module=language == "javascript" and looks_like_module(code),
            files_in=bool(files_in),
            files_out=files_out is not None,
        )

    async def prepare(
        self, language: str = "python", *, files_in: bool = False, files_out: bool = False
    ) -> bool:
        """Have a sandbox for this kind of run started ahead (with `ahead` > 0); True once one waits."""
        name, interpreter = self._resolve(language)
        shape = Shape(name, interpreter, files_in=files_in, files_out=files_out)
        return self.ahead > 0 and await self._ahead.prepare(shape)

    def started_ahead(self) -> int:
        """How many sandboxes wait for their program right now."""
        return self._ahead.ready()

    async def aclose(self) -> None:
        """Remove the sandboxes started ahead and wait until every run cgroup is removed; runs still work
        after (each starting its own sandbox)."""
        await self._ahead.aclose()
        self._ahead = Ahead(self._launch, self._discard, 0)
        self.ahead = 0
        await asyncio.to_thread(REMOVER.wait)

    async def _launch(self, shape: Shape) -> Launched:
        """Start the processes of one run of this shape: they wait for the program on stdin."""
        sandboxed = self.isolation is Isolation.BWRAP
        interpreter = shape.interpreter
        python_interpreter = self._interpreters.get("python", interpreter)
        if not sandboxed:  # no mounts: the interpreters where they are on the host
            interpreter, python_interpreter = interpreter.on_host(), python_interpreter.on_host()
        program = interpreter_argv(shape.language, interpreter, self.limits, shape.module)
        python = python_interpreter.path
        wrapper = limit_wrapper(
            self.limits, memory_limit_mb(shape.language, self.limits), find_prlimit(sandboxed), python
        )
        cgroup = self._run_cgroup()
        in_dir: str | None = None
        scratch: str | None = None
        pipe: list[int] | None = None
        try:
            if sandboxed:
                in_dir = input_dir() if shape.files_in else None
                pipe = list(os.pipe()) if shape.files_out else None
                work = interpreter.work_files + (((in_dir, IN_DIR),) if in_dir is not None else ())
                features, binds = self._probe.features, interpreter.binds
                argv = bwrap_argv(
                    self._bwrap_path, features, self.limits, binds, work, pipe is not None, interpreter.mounts
                )
                command = wrapper + program
                if pipe is not None:
                    command = epilogue_argv("/bin/bash", OUT_DIR, pipe[1], command)
                argv += command
                cwd = "/"
                env = {"PATH": SANDBOX_PATH}
            else:
                scratch = self._scratch(shape)
                argv = wrapper + program
                cwd = scratch
                env = {"PATH": SANDBOX_PATH, "HOME": scratch, "LANG": "C.UTF-8", "TMPDIR": scratch}
                env["MPLBACKEND"] = "Agg"
            proc, cgroup = await spawn(
                argv,
                cwd=cwd,
                env=env,
                pass_fds=(pipe[1],) if pipe is not None else (),
                cgroup=cgroup,
                guardian=self.guardian,
            )
        except BaseException:
            _clean_up(cgroup, in_dir, scratch, pipe)
            raise
        if pipe is not None:
            os.close(pipe[1])  # only the run holds the write end now: EOF comes when it is gone
            pipe[1] = -1
        return Launched(proc, shape, cgroup, in_dir, scratch, pipe)

    async def _discard(self, launched: Launched) -> None:
        """Kill and remove a sandbox that no run took."""
        try:
            await stop(launched.proc, self.isolation is Isolation.BWRAP)
        finally:
            if self.guardian is not None:
                self.guardian.finished(launched.proc.pid)
            self._release(launched)

    @staticmethod
    def _release(launched: Launched) -> None:
        """Remove what a run's processes had, once they are gone: the cgroup, directories, the pipe."""
        pipe, launched.pipe = launched.pipe, None
        _clean_up(launched.cgroup, launched.in_dir, launched.scratch, pipe)

    @staticmethod
    def _scratch(shape: Shape) -> str:
        """An unsandboxed run's working directory, with in/ and out/ when the run has files."""
        scratch = tempfile.mkdtemp(prefix="code-scratch-")
        subdirs = [name for name, wanted in ((IN_DIR, shape.files_in), (OUT_DIR, shape.files_out)) if wanted]
        for path in [scratch, *(os.path.join(scratch, name) for name in subdirs)]:
            if path != scratch:
                os.mkdir(path)
            if os.geteuid() == 0:
                os.chown(path, SANDBOX_UID, SANDBOX_UID)
        return scratch

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
        launched: Launched,
        code: str,
        language: str,
        budget_s: float,
        on_output: OutputWatcher | None = None,
    ) -> tuple[ExecutionResult, bytes, bool]:
        """Send the program, stream its output under the caps, enforce the wall clock, reap everything.

        Also returns what came through the run's pipe (the tar of out/), at most the size of the working
        tmpfs, and whether more came than that (the head is still returned: the whole files in it are kept).
        """
        proc, cgroup, pipe = launched.proc, launched.cgroup, launched.pipe
        sandboxed = launched.scratch is None
        out = Capture(self.limits.output_cap_bytes)
        err = Capture(self.limits.output_cap_bytes)
        files = Capture(self.limits.scratch_mb * _MIB + _MIB)
        started = time.monotonic()
        tasks = [
            asyncio.create_task(feed_stdin(proc.stdin, code.encode("utf-8", errors="replace"))),
            asyncio.create_task(pump(proc.stdout, out, LineWatch(on_output) if on_output else None)),
            asyncio.create_task(pump(proc.stderr, err, LineWatch(on_output) if on_output else None)),
        ]
        if pipe is not None:
            tasks.append(asyncio.create_task(pump_fd(pipe, files)))
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
                await stop(proc, sandboxed)
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


def _clean_up(
    cgroup: RunCgroup | None, in_dir: str | None, scratch: str | None, pipe: list[int] | None
) -> None:
    """Release a run's cgroup (killing what is left in it), remove its directories, close its pipe."""
    try:
        if cgroup is not None:
            cgroup.release()
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
        remove(in_dir)
        for fd in pipe or ():
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)


def describe(executor: Executor) -> str:
    """One line for the startup report, e.g. "code sandbox: bwrap (...; memory bound: cgroup v1 ...)"."""
    if isinstance(executor, LocalExecutor):
        limits = executor.limits
        langs = ", ".join(executor.languages())
        if executor.isolation is Isolation.UNAVAILABLE:
            return f"code sandbox: unavailable, code runs are refused ({executor.isolation_reason})"
        network = "on" if limits.network else "off"
        line = f"code sandbox: {executor.isolation} ({langs}; network {network}, "
        line += f"{limits.timeout_s:g} s, {limits.memory_mb} MB; memory bound: {executor.memory_bound}"
        if executor.ahead:
            line += f"; {executor.ahead} sandbox started ahead per kind of run"
        line += ")"
        if executor.isolation is Isolation.UNSANDBOXED:
            line += f" WITHOUT isolation: {executor.isolation_reason}"
        return line
    return f"code sandbox: {executor.isolation} ({', '.join(executor.languages())})"
