"""The services the composition root (bot/process/wiring.py) builds, one builder each, from the settings and
what was built before: usage accounting, the LLM and audio clients, media, memory and sessions, the
schedules, the approval gate and the agent (the code tool's: bot/process/build_code.py; the search chain,
MCP servers, helper agents and embedder: bot/process/parts.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from bot.config.settings import Settings
from bot.process.parts import embedder_of, helper_tools, secret
from core_tools.agent import Agent, AgentConfig
from core_tools.approval import ApprovalGate, ApprovalPolicy
from core_tools.llm import AudioClient, ChatModel, LLMClient
from core_tools.media import MediaConfig, MediaService
from core_tools.media.reader import ReadLimits
from core_tools.memory.extract import MemoryExtractor
from core_tools.memory.judge import MemoryJudge
from core_tools.memory.prompt import RecalledMemories
from core_tools.memory.store import MemoryStore
from core_tools.memory.tool import MemoryTool
from core_tools.registry import ToolRegistry
from core_tools.schedule.costs import CostHooks
from core_tools.schedule.service import ScheduleService
from core_tools.schedule.tool import ScheduleTool
from core_tools.schedule.validate import Limits
from core_tools.sessions import PreviousSession, SessionManager
from core_tools.tools.results import ResultsTool
from core_tools.tools.search import SearchTool
from core_tools.types import Notifier
from core_tools.usage import Caps, UsageService, parse_prices
from db.approvals import Approvals
from db.conversations import Conversations
from db.media import MediaFiles
from db.results import ToolResults
from db.schedules import Schedules
from db.series import Series
from db.task_costs import TaskCosts
from db.usage import UsageLog, UsageQueries


def usage_service(
    settings: Settings, sm: sessionmaker[Session], engine: Engine, notifier: Notifier | None
) -> UsageService:
    """Prices, the usage caps (a cap's notice goes to the owner through `notifier`) and usage reports."""
    return UsageService(
        UsageQueries(sm, engine),
        prices=parse_prices(settings.llm_prices),
        defaults=Caps(
            daily_usd=settings.budget_daily_usd,
            monthly_usd=settings.budget_monthly_usd,
            daily_tokens=settings.budget_daily_tokens,
            monthly_tokens=settings.budget_monthly_tokens,
        ),
        owner_id=settings.owner_id,
        default_timezone=settings.default_timezone,
        notifier=notifier,
        task_costs=TaskCosts(sm),
        series=Series(sm),
    )


def llm_client(settings: Settings, usage: UsageLog, budget: UsageService) -> LLMClient:
    """The chat model's client: each request recorded in `usage` and checked against the caps."""
    return LLMClient(
        base_url=str(settings.openai_base_url),
        api_key=settings.openai_api_key.get_secret_value(),
        model=settings.models[0],
        background_model=settings.llm_summary_model,
        timeout_s=settings.llm_timeout_s,
        max_retries=settings.llm_max_retries,
        recorder=usage,
        budget=budget,
        max_completion_tokens=settings.llm_max_completion_tokens,
        vision=settings.llm_vision,
    )


def audio_client(settings: Settings, usage: UsageLog, budget: UsageService) -> AudioClient:
    """Transcription (when TRANSCRIPTION_MODEL is set) and speech, at the chat model's endpoint unless
    their own are given."""
    return AudioClient(
        base_url=str(settings.transcription_base_url or settings.openai_base_url)
        if settings.transcription_model
        else None,
        api_key=secret(settings.transcription_api_key) or settings.openai_api_key.get_secret_value(),
        model=settings.transcription_model or "",
        tts_base_url=str(settings.tts_base_url or settings.openai_base_url),
        tts_api_key=secret(settings.tts_api_key) or settings.openai_api_key.get_secret_value(),
        tts_model=settings.tts_model,
        tts_voice=settings.tts_voice,
        timeout_s=max(settings.llm_timeout_s, 120.0),
        max_retries=settings.llm_max_retries,
        recorder=usage,
        budget=budget,
    )


def media_service(settings: Settings, sm: sessionmaker[Session], engine: Engine) -> MediaService:
    """The files users send (stored under MEDIA_DIR), read within the settings' limits."""
    return MediaService(
        MediaFiles(sm, engine),
        MediaConfig(
            root=Path(settings.media_dir),
            inline_chars=settings.file_inline_chars,
            page_chars=settings.file_page_chars,
            history_images=settings.vision_history_images,
            read=ReadLimits(
                timeout_s=settings.file_read_timeout_s,
                memory_mb=settings.file_read_memory_mb,
                max_chars=settings.file_max_text_chars,
            ),
        ),
    )


def tool_registry(
    settings: Settings, sm: sessionmaker[Session], usage: UsageLog, media: MediaService, search: SearchTool
) -> ToolRegistry:
    """The registry with the first tools: the media tools, then the search chain's."""
    registry = ToolRegistry(recorder=usage, results=ToolResults(sm))
    for tool in [*media.tools(), *search.tools()]:
        registry.register(tool, timeout_s=settings.tool_timeout_s)
    return registry


@dataclass(frozen=True)
class MemoryParts:
    """The memory store, its extractor (memories from a session's messages) and the sessions."""

    store: MemoryStore
    extractor: MemoryExtractor
    sessions: SessionManager


def memory_and_sessions(
    settings: Settings,
    sm: sessionmaker[Session],
    engine: Engine,
    conversations: Conversations,
    llm: ChatModel,
    usage: UsageLog,
    budget: UsageService,
    registry: ToolRegistry,
) -> MemoryParts:
    """The memory store and extractor, the sessions (an ended one is extracted), and the memory tool,
    registered."""
    memory = MemoryStore(
        sm,
        engine,
        embedder_of(settings, usage, budget),
        mid_ttl=timedelta(days=settings.memory_mid_ttl_days),
        short_ttl=timedelta(days=settings.memory_short_ttl_days),
        judge=MemoryJudge(llm),
        # Dates in recall queries are the user's ("yesterday"); the sessions are built below.
        timezone_of=lambda user_id: sessions.timezone(user_id),
    )
    extractor = MemoryExtractor(
        memory, llm, sm, enabled=settings.memory_extract, delay_s=settings.memory_extract_delay_s
    )
    sessions = SessionManager(
        conversations,
        llm,
        memory,
        default_timezone=settings.default_timezone,
        auto_divide=settings.session_auto_divide,
        rollover_at=settings.session_rollover_time,
        idle=timedelta(minutes=settings.session_idle_minutes),
        on_end=extractor.session_ended,
    )
    registry.register(
        MemoryTool(memory, sessions.start_for_model, conversations).memory, timeout_s=settings.tool_timeout_s
    )
    return MemoryParts(memory, extractor, sessions)


def schedule_tool(
    settings: Settings,
    sm: sessionmaker[Session],
    conversations: Conversations,
    llm: ChatModel,
    budget: UsageService,
    registry: ToolRegistry,
    wake: Callable[[], None],
) -> ScheduleTool:
    """The schedule tool, registered: `wake` tells the front end's clock something may be due sooner."""
    schedules = ScheduleTool(
        ScheduleService(
            Schedules(sm),
            conversations.user_timezone,
            default_timezone=settings.default_timezone,
            limits=Limits(
                max_active=settings.schedule_max_active,
                min_task_interval=timedelta(minutes=settings.schedule_min_task_interval_min),
                min_message_interval=timedelta(minutes=settings.schedule_min_message_interval_min),
            ),
            # A task's forecast is priced at the model its turn uses (the default: a task names none).
            costs=CostHooks(
                forecast=lambda user_id, sid: budget.task_forecast(user_id, llm.model, sid),
                spent_this_month=budget.task_spend_this_month,
            ),
        ),
        wake=wake,
    )
    registry.register(schedules.schedule, timeout_s=settings.tool_timeout_s)
    return schedules


def results_tool(settings: Settings, sm: sessionmaker[Session], registry: ToolRegistry) -> None:
    """Register `read_result`: its pages are bounded by its own `length`, never stored and paged again."""
    registry.register(
        # A result asked for whole gets at most half the history budget (about 4 characters a token).
        ResultsTool(ToolResults(sm), max_whole_chars=settings.history_token_budget * 2).read_result,
        timeout_s=settings.tool_timeout_s,
        paged=False,
    )


def approval_gate(settings: Settings, sm: sessionmaker[Session], engine: Engine) -> ApprovalGate:
    """Asks the user before the calls APPROVE_TOOLS (or an MCP server's `confirm`) names."""
    return ApprovalGate(
        Approvals(sm, engine),
        ApprovalPolicy.parse(settings.approve_tools),
        settings.approval_timeout_s,
        secrets=settings.secrets(),
    )


def agent_of(
    settings: Settings,
    llm: ChatModel,
    registry: ToolRegistry,
    conversations: Conversations,
    budget: UsageService,
    media: MediaService,
    approvals: ApprovalGate,
    memory: MemoryParts,
) -> Agent:
    """The turn loop, with the helper agents registered last (their tools are checked against every other
    tool) and what goes into a turn's system prompt."""
    config = AgentConfig(
        max_tool_rounds=settings.max_tool_rounds,
        history_token_budget=settings.history_token_budget,
        turn_timeout_s=settings.turn_timeout_s,
        default_timezone=settings.default_timezone,
    )
    helpers = helper_tools(settings, llm, registry, config.private_tools)
    if helpers is not None:  # a helper cannot ask the user: a call that needs approval is refused in it
        helpers.subturns.needs_approval = lambda name: approvals.policy.needs(name, registry.get(name))
    return Agent(
        llm,
        registry,
        conversations,
        config,
        context=[PreviousSession(conversations)],
        # Memories are private: never in a group's prompt, and a group's messages never become them.
        private_context=[RecalledMemories(memory.store, settings.memory_prompt_budget_chars)],
        private_turn_observers=[memory.extractor.note_turn],
        budget=budget,
        media=media,
        approvals=approvals,
        cost_of=lambda r: budget.prices.cost(r.model, r.prompt_tokens, r.completion_tokens, r.cached_tokens),
    )
