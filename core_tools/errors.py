"""The project's exception hierarchy: small on purpose; see docs/design-notes.md, habit 9."""

from __future__ import annotations


class AssistantError(Exception):
    """Base of every error this project raises on purpose."""


class ToolError(AssistantError):
    """A tool failed in a way the model should read: the message goes back to the model verbatim."""


class LLMUnavailable(AssistantError):
    """The LLM endpoint could not give an answer after retries; the message is safe to show a user."""


class BudgetExceeded(AssistantError):
    """A request was refused before it was sent because a usage cap is reached."""


class TaskBudgetExceeded(BudgetExceeded):
    """A scheduled task's request was refused because the task reached its own monthly limit."""


class MediaError(AssistantError):
    """A file, photo or voice note could not be used; the message says why and is safe to show a user."""
