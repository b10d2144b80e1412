"""Helper agents as tools: configured agents (`agent__NAME`, AGENTS_FILE) and `delegate`, each a sub-turn
with its own prompt and a subset of the caller's tools, one level deep, accounted as purpose `subagent`."""

from core_tools.agents.config import AgentSpec, check_tools, load_agents, parse_agents
from core_tools.agents.subturn import Helper, SubTurnLimits, SubTurns, in_helper
from core_tools.agents.tools import HelperTools, is_helper_tool

__all__ = [
    "AgentSpec",
    "Helper",
    "HelperTools",
    "SubTurnLimits",
    "SubTurns",
    "check_tools",
    "in_helper",
    "is_helper_tool",
    "load_agents",
    "parse_agents",
]
