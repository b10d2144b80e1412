"""The composition root: builds every object once; everything else receives what it needs, at construction.
The front ends (the Telegram bot, the terminal chat: bot/process/fronts.py) build around `build_services`."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from sqlalchemy import Engine

from bot.config.settings import Settings
from bot.process.build_checkin import checkin_service
from bot.process.build_code import code_tool
from bot.process.builders import (
    agent_of,
    approval_gate,
    audio_client,
    llm_client,
    media_service,
    memory_and_sessions,
    results_tool,
    schedule_tool,
    tool_registry,
    usage_service,
)
from bot.process.parts import mcp_servers, search_tool
from bot.process.upgrade.plan import require_schema
from bot.runtime.replica import Replica, ReplicaEvents
from bot.runtime.services import Services
from core_tools.llm import ChatClient
from core_tools.types import FileSink, Notifier
from core_tools.usage import UsageService
from db import recall_cache
from db.conversations import Conversations
from db.engine import make_engine, make_sessionmaker
from db.runtime import RuntimeStore
from db.topics import Topics
from db.usage import UsageLog

# aiohttp's server is imported only where WEBAPP_LISTEN is set (build_webapp).
if TYPE_CHECKING:
    from bot.webapp.server import WebAppServer

log = logging.getLogger(__name__)


def _no_wake() -> None:
    return None


@dataclass(frozen=True)
class Outlets:
    """What the front end running the services (Telegram, the terminal) gives them at construction: where
    code jobs' notices, a cap's notice to the owner and the files code writes go outside a turn, and how the
    schedule tool tells the front end's clock that something may be due sooner."""

    notifier: Notifier | None = None
    file_sink: FileSink | None = None
    wake: Callable[[], None] = _no_wake


def _no_outlets(topics: Topics) -> Outlets:
    return Outlets()


@dataclass(frozen=True)
class FrontEnd:
    """The front end the services are built for: its outlets (made from the forum topics, which the services
    own: a topic's messages go to its forum) and the replica's events (the chats it drives). Without one
    (the MCP server, the operator's commands) nothing is delivered outside a turn and no chat is driven."""

    outlets: Callable[[Topics], Outlets] = _no_outlets
    replica: ReplicaEvents = field(default_factory=ReplicaEvents)


# What builds the chat model instead of the provider's client (the upgrade's self-test: a built-in fake).
ModelMaker = Callable[[UsageLog, UsageService], ChatClient]


def build_services(
    settings: Settings, front: FrontEnd | None = None, *, model: ModelMaker | None = None
) -> Services:
    """Bring an empty database to head and build the services for `front` (None: no front end), each given
    what it needs at construction, in dependency order (bot/process/builders.py, one builder each);
    ValueError means a setting is unusable, UpgradeFailed that the database is behind this code (the entry
    points take it through the checked upgrade first: bot/process/upgrade/start.py, `ensure_schema`).

    Two callbacks close a cycle, each over an object built after the one that calls it, and nothing calls
    them before it exists: the code tool's registration, renewed when the toolkit or a sandbox service's
    limits change (bot/process/build_code.py, CodeRegistration: the executor and the toolkit come before
    the tool), and memory recall's `timezone_of`, which asks the sessions for the user's time zone
    (`memory_and_sessions`: the store comes before the sessions). `model` makes the chat model instead of
    the provider's client (LLM_MODEL at OPENAI_BASE_URL)."""
    front = front or FrontEnd()
    search = search_tool(settings)
    require_schema(settings)
    engine = make_engine(settings.database_url)
    replica = replica_of(settings, engine, front.replica)
    recall_cache.configure(settings.memory_recall_cache_mb)
    sm = make_sessionmaker(engine)
    conversations = Conversations(sm, engine)
    usage = UsageLog(sm, engine)
    outlets = front.outlets(conversations.topics)
    budget = usage_service(settings, sm, engine, outlets.notifier)
    llm = llm_client(settings, usage, budget) if model is None else model(usage, budget)
    audio = audio_client(settings, usage, budget)
    media = media_service(settings, sm, engine)
    # The tools in the order the model is shown them: media, search, code, memory, schedule, read_result,
    # then MCP's (once connected) and the helper agents' (registered with the agent: they check the rest).
    registry = tool_registry(settings, sm, usage, media, search)
    log.info("%s", search.describe())
    code = code_tool(settings, sm, registry, llm, media, outlets.notifier, outlets.file_sink, replica)
    memory = memory_and_sessions(settings, sm, engine, conversations, llm, usage, budget, registry)
    schedules = schedule_tool(settings, sm, conversations, llm, budget, registry, outlets.wake)
    checkins = checkin_service(settings, sm, schedules, memory.store, budget, llm)
    results_tool(settings, sm, registry)
    mcp = mcp_servers(settings, registry)
    approvals = approval_gate(settings, sm, engine)
    agent = agent_of(settings, llm, registry, conversations, budget, media, approvals, memory)
    return Services(
        settings=settings,
        engine=engine,
        conversations=conversations,
        usage=usage,
        llm=llm,
        registry=registry,
        agent=agent,
        sessions=memory.sessions,
        search=search,
        code=code.tool,
        notifier=outlets.notifier,
        memory=memory.store,
        usage_service=budget,
        extractor=memory.extractor,
        schedules=schedules,
        mcp=mcp,
        media=media,
        audio=audio,
        files=outlets.file_sink,
        toolkit=code.toolkit,
        approvals=approvals,
        replica=replica,
        checkins=checkins,
    )


def replica_of(settings: Settings, engine: Engine, events: ReplicaEvents) -> Replica:
    """This process among others on the database (its lease): the code tool's jobs are this replica's."""
    lease_s = settings.replica_lease_s
    return Replica(RuntimeStore(engine, timedelta(seconds=lease_s)), lease_s, events)


def build_webapp(services: Services) -> WebAppServer | None:
    """The app's web server when WEBAPP_LISTEN is set (aiohttp's server is imported only then)."""
    settings = services.settings
    address = settings.webapp_address
    if address is None or settings.telegram_bot_token is None:
        return None
    from bot.webapp.server import WebAppServer

    return WebAppServer(
        services,
        host=address[0],
        port=address[1],
        bot_token=settings.telegram_bot_token.get_secret_value(),
        max_age_s=settings.webapp_auth_max_age_s,
    )
