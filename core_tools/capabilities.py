"""What a tool reads and writes: declared where the tool is defined, shown by `doctor` and our MCP server,
and matched by APPROVE_TOOLS patterns such as `writes:external` or `reads:internet`."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

# What a tool may touch: the web, the user's files, code execution (the sandbox), the user's memories, their
# scheduled tasks, and systems outside the bot (another MCP server's tools: whatever they reach).
KINDS = ("internet", "files", "execution", "memory", "schedules", "external")

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Capabilities:
    """The kinds of things a tool reads and writes (each one of KINDS)."""

    reads: frozenset[str] = frozenset()
    writes: frozenset[str] = frozenset()

    @classmethod
    def of(cls, reads: Iterable[str] = (), writes: Iterable[str] = ()) -> Capabilities:
        """Capabilities from kind names; ValueError for a kind not in KINDS."""
        r, w = frozenset(reads), frozenset(writes)
        unknown = (r | w) - set(KINDS)
        if unknown:
            raise ValueError(f"unknown capability kind(s) {', '.join(sorted(unknown))}; known: {KINDS}")
        return cls(r, w)

    @property
    def labels(self) -> list[str]:
        """`reads:KIND` and `writes:KIND`, in KINDS order (what APPROVE_TOOLS patterns match)."""
        return [f"reads:{k}" for k in KINDS if k in self.reads] + [
            f"writes:{k}" for k in KINDS if k in self.writes
        ]

    def describe(self) -> str:
        """One short line: "reads internet; writes files, execution" ("touches nothing" when empty)."""
        parts = []
        if self.reads:
            parts.append("reads " + ", ".join(k for k in KINDS if k in self.reads))
        if self.writes:
            parts.append("writes " + ", ".join(k for k in KINDS if k in self.writes))
        return "; ".join(parts) or "touches nothing outside the turn"

    def as_dict(self) -> dict[str, list[str]]:
        """{"reads": [...], "writes": [...]} for JSON (our MCP server's tool metadata)."""
        return {
            "reads": [k for k in KINDS if k in self.reads],
            "writes": [k for k in KINDS if k in self.writes],
        }


# Another MCP server's tool: we cannot know what it touches, so it is assumed to read and write a system
# outside the bot. Its server's own hints (the MCP `readOnlyHint` annotation) are not trusted for this: a
# server that claims read-only would escape a `writes:external` approval rule.
EXTERNAL = Capabilities(frozenset({"external"}), frozenset({"external"}))

# A helper agent (core_tools/agents): it touches whatever the tools it may use touch; declared as everything,
# an upper bound, so a capability pattern in APPROVE_TOOLS never misses one.
ANY = Capabilities(frozenset(KINDS), frozenset(KINDS))

ATTRIBUTE = "__tool_capabilities__"


def declares(reads: Iterable[str] = (), writes: Iterable[str] = ()) -> Callable[[F], F]:
    """Decorate a tool function with what it reads and writes (the registry reads it at registration)."""
    caps = Capabilities.of(reads, writes)

    def mark(fn: F) -> F:
        setattr(fn, ATTRIBUTE, caps)
        return fn

    return mark


def declared(fn: Any) -> Capabilities | None:
    """What a tool function declared with `declares`, or None (a bound method finds its function's)."""
    caps = getattr(fn, ATTRIBUTE, None)
    return caps if isinstance(caps, Capabilities) else None
