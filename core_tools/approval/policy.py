"""Which tools need the user's approval: APPROVE_TOOLS patterns and MCP servers' `confirm`."""

from __future__ import annotations

from collections.abc import Sequence
from fnmatch import fnmatchcase

from core_tools.capabilities import KINDS
from core_tools.registry import Tool

_SIDES = ("reads", "writes")


class ApprovalPolicy:
    """APPROVE_TOOLS: a comma list of glob patterns over tool names (`probe__*`, `code`) or capabilities
    (`writes:external`, `reads:*`); a tool matching any of them, or one whose MCP server's entry says
    `"confirm"`, needs the user's approval before each call."""

    def __init__(self, patterns: Sequence[str] = ()) -> None:
        self.patterns = tuple(patterns)

    @classmethod
    def parse(cls, text: str) -> ApprovalPolicy:
        """The policy of an APPROVE_TOOLS value; ValueError naming a capability pattern that cannot match."""
        patterns = [p.strip() for p in text.split(",") if p.strip()]
        for p in patterns:
            side, sep, kind = p.partition(":")
            if not sep:
                continue
            if side not in _SIDES:
                raise ValueError(f"APPROVE_TOOLS: {p!r}: a capability pattern starts with reads: or writes:")
            if not any(fnmatchcase(k, kind) for k in KINDS):
                raise ValueError(f"APPROVE_TOOLS: {p!r} matches no capability; known: {', '.join(KINDS)}")
        return cls(patterns)

    def needs(self, name: str, tool: Tool | None) -> bool:
        """Whether a call of the tool `name` (registered as `tool`; None: unknown) waits for approval."""
        if tool is not None and tool.confirm:
            return True
        labels = tool.capabilities.labels if tool is not None and tool.capabilities is not None else []
        for p in self.patterns:
            if ":" in p:
                if any(fnmatchcase(label, p) for label in labels):
                    return True
            elif fnmatchcase(name, p):
                return True
        return False
