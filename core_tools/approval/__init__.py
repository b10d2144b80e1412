"""Approval before risky actions: which tool calls wait for the user's yes (APPROVE_TOOLS, an MCP server's
`confirm`), what the user is shown, and the wait itself (the decision comes through the database)."""

from core_tools.approval.gate import DENIED, ApprovalGate, ApprovalRequest, Asker
from core_tools.approval.policy import ApprovalPolicy
from core_tools.approval.summary import summarize

__all__ = ["DENIED", "ApprovalGate", "ApprovalPolicy", "ApprovalRequest", "Asker", "summarize"]
