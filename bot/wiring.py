"""The composition root: builds every object once; everything else receives what it needs."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pydantic import SecretStr
from sqlalchemy import Engine

from bot.notify import TelegramNotifier
from bot.settings import Settings
from core_tools.agent import Agent, AgentConfig
from core_tools.llm import LLMClient
from core_tools.registry import ToolRegistry
from core_tools.sandbox import LocalExecutor, SandboxLimits, describe
from core_tools.sessions import SessionManager
from core_tools.tools.code import CodeTool
from core_tools.tools.search import SearchTool, build_search_tool
from db.conversations import Conversations
from db.engine import make_engine, make_sessionmaker
from db.executions import Executions
from db.migrate import upgrade
from db.usage import UsageLog

log = logging.getLogger(__name__)


@dataclass
class Services:
    """Everything the front ends (Telegram, terminal) use."""

    settings: Settings
    engine: Engine
    conversations: Conversations
    usage: UsageLog
    llm: LLMClient
    registry: ToolRegistry
    agent: Agent
    sessions: SessionManager
    search: SearchTool
    code: CodeTool
    notifier: TelegramNotifier

    async def aclose(self) -> None:
        """Release connections."""
        await self.llm.close()
        await self.search.aclose()
        self.engine.dispose()


def _secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None


def build_services(settings: Settings) -> Services:
    """Migrate the database to head and build the services; ValueError means a setting is unusable."""
    search = build_search_tool(
        provider_names=[p for p in settings.search_provider.split(",") if p.strip()] or None,
        searxng_url=settings.searxng_url,
        brave_api_key=_secret(settings.brave_api_key),
        tavily_api_key=_secret(settings.tavily_api_key),
        timeout_s=settings.search_timeout_s,
        fetch_allow_private=settings.fetch_allow_private,
    )
    upgrade(settings.database_url)
    engine = make_engine(settings.database_url)
    sm = make_sessionmaker(engine)
    conversations = Conversations(sm)
    usage = UsageLog(sm)
    llm = LLMClient(
        base_url=str(settings.openai_base_url),
        api_key=settings.openai_api_key.get_secret_value(),
        model=settings.llm_model,
        timeout_s=settings.llm_timeout_s,
        max_retries=settings.llm_max_retries,
        recorder=usage,
    )
    registry = ToolRegistry(recorder=usage)
    for tool in search.tools():
        registry.register(tool, timeout_s=settings.tool_timeout_s)
    log.info("%s", search.describe())
    executor = LocalExecutor(
        SandboxLimits(
            timeout_s=settings.code_timeout_s,
            max_timeout_s=settings.code_max_timeout_s,
            memory_mb=settings.code_memory_mb,
            network=settings.code_network,
        ),
        allow_unsandboxed=settings.code_allow_unsandboxed,
    )
    log.info("%s", describe(executor))
    notifier = TelegramNotifier()
    code = CodeTool(
        executor,
        Executions(sm),
        llm,
        notifier,
        generate_attempts=settings.code_generate_attempts,
        generate_wait_s=settings.code_generate_wait_s,
    )
    # The sandbox has its own timeout; the margin covers a generation's LLM calls until a job takes over.
    registry.register(code.code, timeout_s=settings.code_max_timeout_s + settings.code_generate_wait_s + 30)
    agent = Agent(
        llm,
        registry,
        conversations,
        AgentConfig(
            max_tool_rounds=settings.max_tool_rounds,
            history_token_budget=settings.history_token_budget,
            turn_timeout_s=settings.turn_timeout_s,
            default_timezone=settings.default_timezone,
        ),
    )
    return Services(
        settings,
        engine,
        conversations,
        usage,
        llm,
        registry,
        agent,
        SessionManager(conversations),
        search,
        code,
        notifier,
    )
