"""The chat turn: the tool loop (loop.py), a turn's inputs, results and controls (turn.py), and the history a
request sends within its token budget (history.py)."""

from __future__ import annotations

from core_tools.agent.loop import Agent
from core_tools.agent.turn import AgentConfig, TurnControl, TurnInput, TurnResult, TurnSink

__all__ = ["Agent", "AgentConfig", "TurnControl", "TurnInput", "TurnResult", "TurnSink"]
