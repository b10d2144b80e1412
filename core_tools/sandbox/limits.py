"""The limits a run gets, between the bot and its sandbox services: their JSON form in a service's hello,
what every service of a pool allows, and which of the bot's own settings a service overrules."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from core_tools.sandbox.model import SandboxLimits


def smallest_limits(limits: Sequence[SandboxLimits]) -> SandboxLimits:
    """What every one of several sandboxes allows at least: each number's minimum, network only if all
    have it (a pool of services, which may run any run)."""
    values: dict[str, Any] = {}
    for item in fields(SandboxLimits):
        found = [getattr(one, item.name) for one in limits]
        values[item.name] = all(found) if isinstance(found[0], bool) else min(found)
    return SandboxLimits(**values)


def limits_from(raw: object) -> SandboxLimits | None:
    """SandboxLimits from their JSON form (a sandbox service's hello); None when it is not one."""
    if not isinstance(raw, dict):
        return None
    values: dict[str, Any] = {}
    for item in fields(SandboxLimits):
        value, default = raw.get(item.name), getattr(SandboxLimits(), item.name)
        if isinstance(default, bool):
            if not isinstance(value, bool):
                return None
        elif isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
            return None
        values[item.name] = type(default)(value)
    return SandboxLimits(**values)


@dataclass(frozen=True)
class OwnLimit:
    """A limit this bot's own settings would give a run: the setting that says so, and its value."""

    setting: str  # as the operator wrote it, e.g. "CODE_MEMORY_MB"
    field: str  # the SandboxLimits field it would set
    value: float | bool


def _said(field: str, value: object) -> str:
    """What a service's limit means for a run, in words."""
    if field == "timeout_s":
        return f"gives a run {value:g} s unless it asks for less or more"
    if field == "max_timeout_s":
        return f"lets a run ask for at most {value:g} s"
    if field == "memory_mb":
        return f"bounds a run at {value} MB"
    if field == "network":
        return "gives runs network access" if value else "runs code without network"
    return f"sets {field} to {value}"


def disagreements(own: Sequence[OwnLimit], limits: SandboxLimits, where: str) -> list[str]:
    """One line per setting of the bot's that a sandbox service's limits overrule."""
    lines = []
    for limit in own:
        theirs = getattr(limits, limit.field)
        if theirs != limit.value:
            value = str(limit.value).lower() if isinstance(limit.value, bool) else f"{limit.value:g}"
            said = _said(limit.field, theirs)
            lines.append(f"{limit.setting}={value} is ignored: the sandbox service at {where} {said}")
    return lines
