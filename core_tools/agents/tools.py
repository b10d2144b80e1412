"""The helper tools the model sees: one `agent__NAME` per configured agent, and `delegate`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from pydantic import Field

from core_tools.agents.config import AGENT_PREFIX, DELEGATE, AgentSpec
from core_tools.agents.subturn import Helper, SubTurns
from core_tools.capabilities import ANY, KINDS, declares
from core_tools.errors import ToolError
from core_tools.registry import ToolRegistry
from core_tools.types import ToolContext

DELEGATE_PROMPT = (
    "You are a capable assistant. Do the task you are given with the tools you have, then answer with the "
    "result."
)
_TASK_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "task": {
            "type": "string",
            "minLength": 1,
            "maxLength": 20_000,
            "description": "Everything the helper needs: it sees this text and nothing of the conversation.",
        }
    },
    "required": ["task"],
    "additionalProperties": False,
}


def outer_timeout(timeout_s: float) -> float:
    """The registry's backstop on a helper call: its wait for a slot and its work, each up to `timeout_s`,
    with room to spare (SubTurns.run ends either first, with a clear error)."""
    return 2 * timeout_s + 30.0


def is_helper_tool(name: str) -> bool:
    """Whether a tool starts a sub-turn (never offered inside one)."""
    return name == DELEGATE or name.startswith(AGENT_PREFIX)


class HelperTools:
    """Registers the helpers on the registry; each call runs a sub-turn (core_tools.agents.subturn)."""

    def __init__(self, subturns: SubTurns, agents: Sequence[AgentSpec] = ()) -> None:
        self.subturns = subturns
        self.agents = list(agents)
        self.timeout_s: float | None = None

    def register(self, registry: ToolRegistry, *, timeout_s: float, delegate: bool) -> None:
        """Register `agent__NAME` for each agent, and `delegate` when enabled.

        `timeout_s` (SUBAGENT_TIMEOUT_S) bounds a helper's wait for a slot and, from the moment it has one,
        its work (SubTurns.run): the registry's own bound on the call is only a backstop above both.
        """
        self.timeout_s = timeout_s
        backstop = outer_timeout(timeout_s)
        for spec in self.agents:
            registry.register_external(
                spec.tool_name,
                f"Helper agent {spec.name}: {spec.description} It sees only the task you give it "
                "(not this conversation) and answers you, not the user.",
                _TASK_SCHEMA,
                self._agent_fn(spec),
                timeout_s=backstop,
                capabilities=ANY,
            )
        if delegate:
            registry.register(self.delegate, timeout_s=backstop)

    def _agent_fn(self, spec: AgentSpec) -> Any:
        helper = Helper(spec.name, spec.system_prompt, spec.tools, spec.model, spec.max_tokens)

        async def run(ctx: ToolContext, args: dict[str, Any]) -> dict[str, Any]:
            return await self.subturns.run(helper, str(args.get("task", "")), ctx, self.timeout_s)

        return run

    @declares(reads=KINDS, writes=KINDS)  # whatever the tools it hands on touch (capabilities.ANY)
    async def delegate(
        self,
        ctx: ToolContext,
        task: Annotated[
            str,
            Field(
                min_length=1,
                max_length=20_000,
                description="Everything the helper needs: it sees this text and nothing of the conversation.",
            ),
        ],
        tools: Annotated[
            list[str] | None,
            Field(description="Names of your tools the helper may use; omitted: all of them."),
        ] = None,
    ) -> dict[str, Any]:
        """Hand a self-contained piece of work to a helper that runs it on its own and returns its answer to
        you (not to the user): useful for a side task whose steps would clutter the conversation, or for
        several independent tasks at once (call it several times in one step: they run in parallel).

        The helper sees only `task`, none of this conversation, and cannot delegate further.
        """
        mine = self.subturns.caller_tools(ctx)
        chosen = mine if tools is None else list(dict.fromkeys(tools))
        unknown = [t for t in chosen if t not in mine]
        if unknown:
            raise ToolError(
                f"not among your tools: {', '.join(unknown)}; choose from: {', '.join(mine) or 'none'}"
            )
        helper = Helper(DELEGATE, DELEGATE_PROMPT, tuple(chosen))
        return await self.subturns.run(helper, task, ctx, self.timeout_s)
