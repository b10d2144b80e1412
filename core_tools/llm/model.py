"""What the turn loop, the helpers, the memory judge, extraction, session summaries and code generation ask
of a chat model: the interface the OpenAI-compatible client (core_tools.llm.chat.LLMClient) and the
in-process models of the tests (core_tools.llm.testing) both give."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from core_tools.llm.accounting import DeltaCallback
from core_tools.types import ChatMessage, LLMReply


class ChatModel(Protocol):
    """A chat model every request of the app's own work goes through, held to the user's caps and logged."""

    # The default model's name: what a request without `model` is made with and accounted as.
    model: str

    async def complete(
        self,
        messages: Sequence[ChatMessage],
        *,
        tools: list[dict[str, Any]] | None = None,
        on_delta: DeltaCallback | None = None,
        purpose: str = "chat",
        user_id: int | None = None,
        session_id: str | None = None,
        model: str | None = None,
        defer_record: bool = False,
        max_completion_tokens: int | None = None,
    ) -> LLMReply:
        """One request: the reply's text (streamed to `on_delta` as the whole text so far) and tool calls.

        Raises BudgetExceeded before anything is asked when the user's caps are reached, LLMUnavailable (with
        a user-readable reason) when the request fails. `model`: the chat's choice instead of the default.
        `defer_record`: a successful request's usage record is not stored but handed over as
        `reply.unrecorded`, which the caller must settle. `max_completion_tokens`: this request's ceiling.
        """
        ...


class ChatClient(ChatModel, Protocol):
    """A chat model the services own: it can be probed without spending tokens (doctor) and is closed with
    them. The OpenAI-compatible client is one; so is core_tools.llm.testing's FunctionModel (what the
    upgrade's self-test runs a turn against: no provider call, no cost)."""

    async def check(self) -> str:
        """Whether the model answers, in a few words; raises LLMUnavailable with a reason."""
        ...

    async def close(self) -> None:
        """Release what the client holds (its HTTP connections)."""
        ...
