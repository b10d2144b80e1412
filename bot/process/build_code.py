"""The code tool as the composition root (bot/process/wiring.py) builds it: the executor the settings name
(a pool of sandbox services, one service, or a local sandbox), the Python toolkit, the lessons note of a
user's failed runs, and the tool's registration, renewed whenever what its description says changes."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from bot.config.settings import Settings
from bot.process.parts import own_sandbox_limits
from bot.runtime.replica import Replica
from core_tools.code.lessons import LessonsBook
from core_tools.code.slots import CodeLimits
from core_tools.code.tool import CodeTool
from core_tools.llm import ChatModel
from core_tools.media import MediaService
from core_tools.registry import ToolRegistry
from core_tools.sandbox import Executor, LocalExecutor, SandboxLimits, describe
from core_tools.sandbox.client import ServiceExecutor
from core_tools.sandbox.model import FileLimits
from core_tools.sandbox.pool import SandboxPool
from core_tools.sandbox.toolkit import Toolkit
from core_tools.types import FileSink, Notifier
from db.executions import Executions
from db.jobs import Jobs
from db.results import ToolResults

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CodeParts:
    """The code tool and the toolkit it describes (the services install a missing toolkit at start)."""

    tool: CodeTool
    toolkit: Toolkit


class CodeRegistration:
    """The `code` tool's entry in the registry. The executor (when a sandbox service's limits become known)
    and the toolkit (when its state changes) are built before the tool and call `register`: the description
    names only what Python has and the limits that decide a run. A call before the tool exists (a service
    that answered while being built) does nothing: the tool is registered once it is set."""

    def __init__(self, registry: ToolRegistry, settings: Settings) -> None:
        self.registry = registry
        self.settings = settings
        self.tool: CodeTool | None = None
        # Whether runs have the network, as of the last registration: asking a sandbox service that cannot
        # be reached yet would block the turn.
        self.network = settings.code_network

    def sandbox_state(self) -> tuple[bool, bool]:
        """(network on, data toolkit usable): which lessons note a turn gets (core_tools/code/lessons.py)."""
        return self.network, self.tool is not None and self.tool.toolkit

    def register(self) -> None:
        # The sandbox has its own timeout (a service's, when one runs the code); the margin covers a
        # generation's LLM calls until a job takes over, the wait for a run slot and the wait for a toolkit
        # being installed.
        tool, settings = self.tool, self.settings
        if tool is None:
            return
        limits = tool.executor.limits
        if limits is not None:
            self.network = limits.network
        self.registry.unregister("code")
        self.registry.register(
            tool.tool(),
            timeout_s=(limits.max_timeout_s if limits is not None else settings.code_max_timeout_s)
            + settings.code_generate_wait_s
            + 2 * settings.code_queue_wait_s
            + 30,
        )


def executor_of(settings: Settings, registration: CodeRegistration) -> Executor:
    """The sandbox services of SANDBOX_URLS (a pool) or CODE_SANDBOX_SOCKET, else a local sandbox; a
    service's limits, once it answers, register the code tool again."""
    token = settings.code_sandbox_token.get_secret_value() if settings.code_sandbox_token else None
    # A sandbox service's own limits decide every run: each of these it overrules is logged once it answers.
    own = own_sandbox_limits(settings)
    if settings.sandbox_urls:
        pool = SandboxPool(
            [
                ServiceExecutor(url, timeout_margin_s=10.0, token=token, own_limits=own)
                for url in settings.sandbox_urls
            ],
            on_limits=registration.register,
        )
        log.info("%s", pool.describe())
        return pool
    if settings.code_sandbox_socket:
        service = ServiceExecutor(
            settings.code_sandbox_socket,
            timeout_margin_s=10.0,
            token=token,
            own_limits=own,
            on_limits=registration.register,
        )
        log.info("%s", service.describe())
        return service
    local = LocalExecutor(
        SandboxLimits(
            timeout_s=settings.code_timeout_s,
            max_timeout_s=settings.code_max_timeout_s,
            memory_mb=settings.code_memory_mb,
            network=settings.code_network,
        ),
        allow_unsandboxed=settings.code_allow_unsandboxed,
        ahead=settings.code_sandboxes_ahead,
    )
    log.info("%s", describe(local))
    return local


def code_tool(
    settings: Settings,
    sm: sessionmaker[Session],
    registry: ToolRegistry,
    llm: ChatModel,
    media: MediaService,
    notifier: Notifier | None,
    file_sink: FileSink | None,
    replica: Replica,
) -> CodeParts:
    """The code tool, registered, with its executor, toolkit and lessons note; the registration is renewed
    by the executor and the toolkit (CodeRegistration)."""
    registration = CodeRegistration(registry, settings)
    executor = executor_of(settings, registration)
    toolkit = Toolkit(settings.code_python_env or None, executor, on_change=registration.register)
    executions = Executions(sm)
    # The lessons note of each user's failed runs, in the code tool's description of their turns (read
    # from memory: a plain turn runs no query for it).
    lessons = LessonsBook(executions, registration.sandbox_state)
    tool = CodeTool(
        executor,
        executions,
        llm,
        notifier,
        jobs_db=Jobs(sm),
        generate_attempts=settings.code_generate_attempts,
        generate_wait_s=settings.code_generate_wait_s,
        limits=CodeLimits(
            max_runs=settings.code_max_concurrent,
            max_runs_per_user=settings.code_max_concurrent_per_user,
            queue_wait_s=settings.code_queue_wait_s,
            max_generations=settings.code_max_jobs,
            max_generations_per_user=settings.code_max_jobs_per_user,
        ),
        files_in=media.sandbox_files,
        file_sink=file_sink,
        file_limits=FileLimits(settings.code_out_max_files, settings.code_out_max_mb * 1024 * 1024),
        stored_results=ToolResults(sm),
        python_toolkit=toolkit,
        runner=replica.id,
        alive=replica.alive,
        lessons=lessons,
    )
    registry.set_note("code", lessons.note)
    registration.tool = tool
    registration.register()
    return CodeParts(tool, toolkit)
