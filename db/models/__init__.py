"""SQLAlchemy typed models, a module per concern; the schema changes only through Alembic migrations in
migrations/. Every model is importable from here (`from db.models import Message`), and importing this
package registers them all on `Base.metadata`."""

from db.models.approvals import Approval, ApprovalAlways
from db.models.base import Base, Embedding, UTCDateTime, new_id, utcnow
from db.models.checkins import Checkin
from db.models.code import CodeExecution, CodeJob, StoredResult
from db.models.conversations import ChatSession, ChatSettings, ForumTopic, Message, User
from db.models.guest import GuestLink
from db.models.media import MediaFile
from db.models.memory import Memory, MemoryChange, MemoryExtraction
from db.models.memory_check import MemoryCheck
from db.models.runtime import ChatLease, InboxMessage, JobLease, Replica, UpdateSeen
from db.models.schedules import Schedule, ScheduleFiring
from db.models.upgrades import Upgrade
from db.models.usage import Budget, BudgetNotice, LLMCall, ToolCallLog, TurnEvent, TurnInfo
from db.models.watchdog import WatchdogEvent

__all__ = [
    "Approval",
    "ApprovalAlways",
    "Base",
    "Budget",
    "BudgetNotice",
    "ChatLease",
    "ChatSession",
    "ChatSettings",
    "Checkin",
    "CodeExecution",
    "CodeJob",
    "Embedding",
    "ForumTopic",
    "GuestLink",
    "InboxMessage",
    "JobLease",
    "LLMCall",
    "MediaFile",
    "Memory",
    "MemoryChange",
    "MemoryCheck",
    "MemoryExtraction",
    "Message",
    "Replica",
    "Schedule",
    "ScheduleFiring",
    "StoredResult",
    "ToolCallLog",
    "TurnEvent",
    "TurnInfo",
    "UTCDateTime",
    "UpdateSeen",
    "Upgrade",
    "User",
    "WatchdogEvent",
    "new_id",
    "utcnow",
]
